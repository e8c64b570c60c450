package redisstore

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// The Redis client's messages become one structured warning each.
func TestClientLogIsStructured(t *testing.T) {
	var buf testutil.SyncBuffer
	l := clientLog{slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "redis: %s: failed to dial after %d attempts\n", "connection pool", 5)
	var rec map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["level"] != "WARN" || rec["msg"] != "redis client: redis: connection pool: failed to dial after 5 attempts" {
		t.Fatalf("record %v", rec)
	}
}
