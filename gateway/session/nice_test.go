package session

import (
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
)

// Every agent the manager starts, a session's or a probe's (both go
// through confine), gets AgentNice: zero is agent.DefaultNice, what
// serve and the bench run with unless told otherwise, and less than zero
// leaves the gateway's priority.
func TestAgentNiceReachesTheAgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opt, want int
	}{{0, agent.DefaultNice}, {5, 5}, {agent.MaxNice, agent.MaxNice}, {-1, -1}} {
		m := &Manager{opts: Options{AgentNice: tc.opt}}
		cfg, err := m.confine(agent.Config{}, nil, "nice")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Nice != tc.want {
			t.Errorf("AgentNice %d: the agent's Nice is %d, want %d", tc.opt, cfg.Nice, tc.want)
		}
	}
}
