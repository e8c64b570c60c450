package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetLog sends the Redis client's own messages (such as a connection
// pool's failures to dial while Redis is down) to log, as warnings, rather
// than as plain lines on stderr. It applies to every store of the process.
func SetLog(log *slog.Logger) { redis.SetLogger(clientLog{log}) }

// clientLog is go-redis's logger on a slog.Logger.
type clientLog struct{ log *slog.Logger }

func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
}
