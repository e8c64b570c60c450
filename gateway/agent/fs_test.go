package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
)

// TestReadingAMissingFileIsResourceNotFound: fs/read_text_file of a file
// that is not there answers ACP's -32002, not invalid params, which a file
// that is there but is no regular file still gets.
func TestReadingAMissingFileIsResourceNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := newPipeAgent(t, &recorder{}, DefaultMaxLine, acpjson.V1)
	fs, err := newFileServer(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fs.close)
	p.fs = fs
	for path, code := range map[string]float64{"missing.txt": CodeResourceNotFound, "gone/missing.txt": CodeResourceNotFound, "sub": -32602} {
		p.send(t, `{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"sessionId":"s","path":"`+filepath.Join(dir, path)+`"}}`+"\n")
		res := p.next(t)
		e, _ := res["error"].(map[string]any)
		if e["code"] != code {
			t.Errorf("reading %s: %v, want error code %v", path, res, code)
		}
	}
}
