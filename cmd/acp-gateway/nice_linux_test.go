package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/kballard/go-shellquote"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
	"github.com/acp-gateway/acp-gateway/internal/procfs"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// A session's agent, and a child it forks in its turn, run at the
// gateway's nice value plus --agent-nice (10 by default), with and
// without cgroup limits, in a bubblewrap sandbox too; with --agent-nice 0, at the gateway's own, which start-up
// warns of. (Linux: the agent reads the values from /proc.)
func TestAgentNice(t *testing.T) {
	t.Parallel()
	own, ok := procfs.Stat(os.Getpid())
	if !ok {
		t.Fatal("this process's nice value cannot be read")
	}
	if own.Nice >= agent.MaxNice {
		t.Fatalf("the test runs at nice %d: no lower priority is left to give its agents", own.Nice)
	}
	for _, tc := range []struct {
		args []string
		want int
		warn bool
	}{
		{nil, min(own.Nice+agent.DefaultNice, agent.MaxNice), false},
		{[]string{"--agent-nice", "3"}, min(own.Nice+3, agent.MaxNice), false},
		{[]string{"--agent-nice", "0"}, own.Nice, true},
		// Without cgroups the agent is not held before it runs.
		{[]string{"--agent-memory", "0", "--agent-pids", "0", "--agent-cpu", "0"}, min(own.Nice+agent.DefaultNice, agent.MaxNice), false},
		{[]string{"--sandbox", "bwrap"}, min(own.Nice+agent.DefaultNice, agent.MaxNice), false},
		{[]string{"--sandbox", "bwrap", "--agent-nice", "0"}, own.Nice, true},
	} {
		t.Run(strings.Join(append([]string{"flags"}, tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			if slices.Contains(tc.args, "bwrap") {
				testutil.Needs(t, "bwrap")
			}
			// The turn's shell writes the nice values (field 19 of
			// /proc/PID/stat) of its child and of its parent, the agent,
			// as its sandbox's PID namespace names them, to a file of the
			// session's directory, which a sandboxed agent may write.
			cwd := t.TempDir()
			nices := filepath.Join(cwd, "nices")
			cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
				{Shell: `sleep 600 </dev/null >/dev/null 2>&1 & echo $(cut -d" " -f19 /proc/$!/stat) $(cut -d" " -f19 /proc/$PPID/stat) > ` + nices},
			}}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			addr, logs, exited := serveLogs(t, ctx, append([]string{"--agent", "forks=" + shellquote.Join(cmd...)}, tc.args...)...)
			defer stopServe(t, cancel, exited)
			if l := logLine(logs, "agents confined"); l["agent_nice"] != float64(tc.want-own.Nice) {
				t.Errorf("start-up says %v", l)
			}
			if warned := logLine(logs, agentNiceZeroWarning) != nil; warned != tc.warn {
				t.Errorf("warned of --agent-nice 0: %v, want %v", warned, tc.warn)
			}

			calls, stop := context.WithTimeout(ctx, 30*time.Second)
			defer stop()
			client := acpv2connect.NewSessionServiceClient(http.DefaultClient, "http://"+addr)
			created, err := client.CreateSession(calls, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: "forks", Cwd: cwd}))
			if err != nil {
				t.Fatal(err)
			}
			id := created.Msg.GetSessionId()
			if _, err := testutil.Turn(calls, client, &acpv2.PromptRequest{SessionId: id, Prompt: []*acpv2.ContentBlock{
				{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "fork"}}}}}, nil); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(nices)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Fields(string(b)), strings.Fields(strings.Repeat(strconv.Itoa(tc.want)+" ", 2)); !slices.Equal(got, want) {
				t.Errorf("the agent's child and the agent have nice values %q, want %q", got, want)
			}
			// Closing the session ends the agent and its child.
			if _, err := client.CloseSession(calls, connect.NewRequest(&acpv2.CloseSessionRequest{SessionId: id})); err != nil {
				t.Error(err)
			}
		})
	}
	for _, bad := range []string{"-1", "20"} {
		if _, err := parseServe([]string{"--store", "memory:", "--agent-nice", bad}, io.Discard); err == nil || !strings.Contains(err.Error(), "--agent-nice") {
			t.Errorf("--agent-nice %s: %v, want refused", bad, err)
		}
	}
}
