package agentsim

import "os"

// Option configures [Serve].
type Option func(*config)

type config struct {
	exit func(int)
}

func newConfig(opts []Option) config {
	c := config{exit: os.Exit}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithExit replaces the function a [Step.Exit] calls, os.Exit by default.
// When the function returns, Serve stops answering, closes its input and
// output and returns an [*ExitError] carrying the status, so tests can check
// an exit without ending the test process.
func WithExit(exit func(code int)) Option {
	return func(c *config) {
		if exit != nil {
			c.exit = exit
		}
	}
}
