package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
	"github.com/acp-gateway/acp-gateway/gateway/server"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/gen/acp/v2/acpv2connect"
)

// try runs one turn against a gateway and shows it, answering permission
// requests with their first allow option and elicitations as the user
// says on the terminal (asker; declined when stdin is not one): for a
// person by default (the agent's text, its tool calls a line each, diffs,
// the permission asked and answered), or with --json every event as a
// line of proto JSON. It is the newcomer's first look at the stream.
func try(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("try", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+server.DefaultListen, "gateway base URL")
	agent := fs.String("agent", "demo", "agent name")
	prompt := fs.String("prompt", "Show me what you can do.", "prompt text")
	cwd := fs.String("cwd", "", "working directory of the session on the gateway's machine, in your workspace there (default: a new directory the gateway makes)")
	asJSON := fs.Bool("json", false, "print every event as a line of proto JSON, and what try does as # comments, rather than the turn for a person")
	tokens := addTokenFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	token, err := tokens.resolve()
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("takes no arguments, got %q", fs.Args())
	}
	if err == nil {
		err = checkCwd(*cwd)
	}
	if err != nil {
		fmt.Fprintf(stderr, "acp-gateway try: %v\n", err)
		return exitUsage
	}
	if warning := tokenInClear(*url, token); warning != "" {
		fmt.Fprintf(stderr, "acp-gateway try: warning: %s\n", warning)
	}
	var printer turnPrinter = newTextPrinter(stdout)
	if *asJSON {
		printer = jsonPrinter{stdout}
	}
	err = runTry(ctx, bridge.NewClient(http.DefaultClient, *url, token), *agent, *cwd, *prompt, printer, newAsker(stdin, stderr))
	printer.done()
	if err != nil {
		fmt.Fprintf(stderr, "acp-gateway try: %v\n", err)
		return 1
	}
	return 0
}

func runTry(ctx context.Context, c acpv2connect.SessionServiceClient, agent, cwd, prompt string, out turnPrinter, ask *asker) (err error) {
	created, err := c.CreateSession(ctx, connect.NewRequest(&acpv2.CreateSessionRequest{Agent: agent, Cwd: cwd}))
	if err != nil {
		return err
	}
	id := created.Msg.GetSessionId()
	out.session(id)
	defer func() {
		if ctx.Err() != nil {
			// Interrupted (Ctrl-C): the gateway keeps a turn whose stream
			// drops, so it is cancelled, lest it run on, its permission
			// request waiting, without us.
			cancelTurn(ctx, c, id, out)
			err = ctx.Err()
			return
		}
		showSession(ctx, c, id, out)
	}()
	stream, err := c.Prompt(ctx, connect.NewRequest(&acpv2.PromptRequest{SessionId: id, Prompt: []*acpv2.ContentBlock{
		{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: prompt}}},
	}}))
	if err != nil {
		return err
	}
	defer stream.Close()
	var ended *acpv2.TurnEnded
	var lastSeq uint64
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev == nil {
			continue
		}
		lastSeq = ev.GetSeq()
		if te := ev.GetTurnEnded(); te != nil {
			ended = te
		}
		if err := out.event(ev); err != nil {
			return err
		}
		if pr := ev.GetPermissionRequest(); pr != nil {
			option := ""
			for _, o := range pr.GetOptions() {
				if o.GetKind() == "allow_once" || o.GetKind() == "allow_always" {
					option = o.GetOptionId()
					break
				}
			}
			req := &acpv2.RespondPermissionRequest{SessionId: id, RequestId: pr.GetRequestId(), OptionId: option, Cancelled: option == ""}
			out.answering(pr, option)
			if _, err := c.RespondPermission(ctx, connect.NewRequest(req)); err != nil {
				return err
			}
		}
		if er := ev.GetElicitationRequest(); er != nil {
			if err := answerElicitation(ctx, c, id, er, ask, out); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err() // the turn is cancelled on the way out
	}
	switch {
	case stream.Err() != nil:
		return stream.Err()
	case ended == nil:
		return fmt.Errorf("the stream ended before the turn did; follow it with Watch afterSeq=%d", lastSeq)
	case ended.GetError() != "":
		return fmt.Errorf("the turn failed: %s", ended.GetError())
	}
	return nil
}

// answerElicitation answers elicitation req of session id as ask says.
// One answered first by someone else, or ended meanwhile (the gateway's
// --permission-timeout), is said so, and the turn goes on; so is an
// answer the gateway refuses, declined instead.
func answerElicitation(ctx context.Context, c acpv2connect.SessionServiceClient, id string, req *acpv2.ElicitationRequest, ask *asker, out turnPrinter) error {
	res, why, err := ask.answer(ctx, req)
	if err != nil {
		return err
	}
	res.SessionId = id
	if why != "" {
		out.note(fmt.Sprintf("answering %s with decline: %s", req.GetRequestId(), why))
	} else {
		out.note(fmt.Sprintf("answering %s with %s", req.GetRequestId(), res.GetAction()))
	}
	_, err = c.RespondElicitation(ctx, connect.NewRequest(res))
	if connect.CodeOf(err) == connect.CodeInvalidArgument {
		out.note(fmt.Sprintf("the gateway refused the answer to %s (%v): declining", req.GetRequestId(), err))
		_, err = c.RespondElicitation(ctx, connect.NewRequest(&acpv2.RespondElicitationRequest{SessionId: id, RequestId: req.GetRequestId(), Action: acpjson.ElicitDecline}))
	}
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodeNotFound:
		out.note(fmt.Sprintf("%s no longer waits for an answer: %v", req.GetRequestId(), err))
		return nil
	}
	return err
}

// cancelTurn cancels session id's turn after ctx ended, and says what
// became of it.
func cancelTurn(ctx context.Context, c acpv2connect.SessionServiceClient, id string, out turnPrinter) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := c.Cancel(cctx, connect.NewRequest(&acpv2.CancelRequest{SessionId: id})); err != nil {
		out.note(fmt.Sprintf("interrupted: the turn could not be cancelled (%v): it may run on; see GetSession turnRunning", err))
		return
	}
	out.note("interrupted: the turn was cancelled")
	showSession(cctx, c, id, out)
}

// showSession prints whether session id runs a turn and how many
// permission requests and elicitations wait, as GetSession says.
func showSession(ctx context.Context, c acpv2connect.SessionServiceClient, id string, out turnPrinter) {
	got, err := c.GetSession(ctx, connect.NewRequest(&acpv2.GetSessionRequest{SessionId: id}))
	if err != nil {
		return
	}
	snap := got.Msg.GetSession()
	running := "no turn running"
	if snap.GetTurnRunning() {
		running = fmt.Sprintf("a turn running since seq %d", snap.GetTurnStartedSeq())
	}
	out.note(fmt.Sprintf("session %s: %s, %s, %d permission requests and %d elicitations waiting", id, snap.GetState(), running,
		len(snap.GetPendingPermissions()), len(snap.GetPendingElicitations())))
}
