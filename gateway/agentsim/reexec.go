package agentsim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// reexecArg, first among a program's arguments and followed by a Script as
// JSON, makes the program the scripted agent (see [Command]).
const reexecArg = "-agentsim-script"

// Command returns the command line that plays s as an ACP agent by running
// this program again: the program (a test binary, typically) must call
// [ServeIfCommanded] before anything else, in its TestMain.
func Command(s Script) ([]string, error) {
	js, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return []string{os.Args[0], reexecArg, string(js)}, nil
}

// ServeIfCommanded plays the script on stdin and stdout, then exits, when
// this program was started by a command line from [Command]. Otherwise it
// returns at once.
func ServeIfCommanded() {
	if len(os.Args) != 3 || os.Args[1] != reexecArg {
		return
	}
	var s Script
	if err := json.Unmarshal([]byte(os.Args[2]), &s); err != nil {
		fmt.Fprintln(os.Stderr, "agentsim: bad script:", err)
		os.Exit(2)
	}
	// The gateway closing the pipe is how a run ends, not an error.
	signal.Ignore(syscall.SIGPIPE)
	if s.IgnoreEOF {
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	}
	err := Serve(context.Background(), os.Stdin, os.Stdout, s, os.Stderr)
	if s.IgnoreEOF {
		select {} // until SIGKILL
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentsim:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
