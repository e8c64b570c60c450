package server

import (
	"compress/gzip"
	"fmt"
	"io"

	"connectrpc.com/connect"
)

// withBoundedGzip replaces connect-go's gzip decompressor with one that
// inflates no more than readMax+1 bytes of a message. connect-go reads a
// compressed message's first readMax+1 inflated bytes and, past readMax,
// inflates the rest to report the message's size: a gigabyte of work for
// a megabyte of a gzip bomb. This one stops there and says the message is
// too large (resource_exhausted, as connect-go reports it).
func withBoundedGzip(readMax int) connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &boundedGzip{max: int64(readMax)} },
		func() connect.Compressor { return gzip.NewWriter(io.Discard) })
}

// boundedGzip is a gzip reader that fails once it has given max+1 bytes.
type boundedGzip struct {
	gzip.Reader
	max, n int64
}

func (z *boundedGzip) Read(p []byte) (int, error) {
	if z.n > z.max {
		return 0, fmt.Errorf("it inflates to more than %d bytes", z.max)
	}
	if rest := z.max + 1 - z.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := z.Reader.Read(p)
	z.n += int64(n)
	return n, err
}

func (z *boundedGzip) Reset(r io.Reader) error {
	z.n = 0
	return z.Reader.Reset(r)
}
