//go:build !linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/acp-gateway/acp-gateway/internal/procfs"
)

// procAttr is how an agent's process starts: in a process group of its
// own, which Close ends. Darwin has no PR_SET_PDEATHSIG: an agent outlives
// a gateway that is SIGKILLed (a gateway that exits otherwise closes it).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// fdPath names the directory that the descriptor of f refers to: opening
// /dev/fd/N on darwin duplicates descriptor N.
func fdPath(f *os.File) string { return fmt.Sprintf("/dev/fd/%d", f.Fd()) }

// ownNice is the nice value of this process. (Darwin's getpriority answers
// -1 both for nice -1 and for an error.)
func ownNice() (int, error) {
	p, ok := procfs.Stat(os.Getpid())
	if !ok {
		return 0, errors.New("this process's nice value cannot be read")
	}
	return p.Nice, nil
}
