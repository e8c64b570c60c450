package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sourcegraph/jsonrpc2"
)

// maxFileBytes bounds a file the agent reads or writes through the gateway.
const maxFileBytes = 16 << 20

// fileServer serves the agent's fs/* requests inside its working directory.
// It uses os.Root, so neither `..` nor a symbolic link can reach outside.
type fileServer struct {
	dir  string
	root *os.Root
}

// newFileServer serves files inside dir, found from ws when it is set (an
// open descriptor of dir, see Config.Workspace).
func newFileServer(dir string, ws *os.File) (*fileServer, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("agent: working directory %q is not absolute", dir)
	}
	open := dir
	if ws != nil {
		// The directory the descriptor names, wherever dir leads now.
		open = fdPath(ws)
	}
	root, err := os.OpenRoot(open)
	if err != nil {
		return nil, fmt.Errorf("agent: working directory: %w", err)
	}
	return &fileServer{dir: filepath.Clean(dir), root: root}, nil
}

func (f *fileServer) close() { _ = f.root.Close() }

// rel maps an absolute path from the agent to a path inside the root.
func (f *fileServer) rel(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("path %q is not absolute", path)
	}
	rel, err := filepath.Rel(f.dir, filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("path %q is outside the session's working directory", path)
	}
	return rel, nil
}

// open opens rel inside the root, refusing anything but a regular file.
// It opens without blocking: the request is served on the agent's read
// loop, and opening a FIFO (which an agent can make in its cwd) would
// otherwise wait for a peer for ever, stalling the session.
func (f *fileServer) open(rel string, flag int) (*os.File, error) {
	file, err := f.root.OpenFile(rel, flag|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ENXIO) {
		// A FIFO opened for writing with no reader.
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("%s is not a regular file", filepath.ToSlash(rel))}
	}
	if err != nil {
		return nil, fsError(err)
	}
	info, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, fsError(err)
	}
	if !info.Mode().IsRegular() {
		file.Close()
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("%s is not a regular file (%s)", filepath.ToSlash(rel), kind(info.Mode()))}
	}
	return file, nil
}

// kind names a file's type for an error message.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.Type().String()
}

// CodeResourceNotFound is ACP's JSON-RPC error code for a resource, such
// as a file, that is not there.
const CodeResourceNotFound = -32002

func fsError(err error) *jsonrpc2.Error {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// Do not echo the gateway's own paths; name the operation and cause.
		msg = pe.Op + ": " + pe.Err.Error()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &jsonrpc2.Error{Code: CodeResourceNotFound, Message: "Resource not found: " + msg}
	}
	return &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: msg}
}

func (f *fileServer) read(params json.RawMessage) (any, error) {
	var p struct {
		Path  string `json:"path"`
		Line  *int   `json:"line"`
		Limit *int   `json:"limit"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "fs/read_text_file: " + err.Error()}
	}
	rel, err := f.rel(p.Path)
	if err != nil {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: err.Error()}
	}
	file, err := f.open(rel, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxFileBytes+1))
	if err != nil {
		return nil, fsError(err)
	}
	if len(data) > maxFileBytes {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("file is larger than %d bytes", maxFileBytes)}
	}
	content := string(data)
	if p.Line != nil || p.Limit != nil {
		content = sliceLines(content, p.Line, p.Limit)
	}
	return map[string]string{"content": content}, nil
}

// sliceLines returns limit lines starting at 1-based line.
func sliceLines(s string, line, limit *int) string {
	start := 1
	if line != nil && *line > 1 {
		start = *line
	}
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, maxFileBytes+1)
	n, taken := 0, 0
	for sc.Scan() {
		n++
		if n < start {
			continue
		}
		if limit != nil && taken >= *limit {
			break
		}
		b.WriteString(sc.Text())
		b.WriteByte('\n')
		taken++
	}
	return b.String()
}

func (f *fileServer) write(params json.RawMessage) (any, error) {
	var p struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.Content == nil {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "fs/write_text_file needs path and content"}
	}
	if len(*p.Content) > maxFileBytes {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("content is larger than %d bytes", maxFileBytes)}
	}
	rel, err := f.rel(p.Path)
	if err != nil {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: err.Error()}
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := f.root.MkdirAll(dir, 0o755); err != nil {
			return nil, fsError(err)
		}
	}
	file, err := f.open(rel, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	if err := file.Truncate(0); err != nil {
		file.Close()
		return nil, fsError(err)
	}
	if _, err := file.WriteString(*p.Content); err != nil {
		file.Close()
		return nil, fsError(err)
	}
	if err := file.Close(); err != nil {
		return nil, fsError(err)
	}
	return nil, nil
}
