package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// asker answers the elicitations of `acp-gateway try` on the terminal: a
// url one by printing its URL and asking accept or decline, a form one by
// asking accept or decline and then each top-level property of its schema
// by its type. Without a terminal on stdin it declines every elicitation
// without reading.
type asker struct {
	in          *bufio.Reader
	interactive bool
	// ask is where the questions go (stderr: stdout holds the events).
	ask io.Writer
}

// newAsker returns the asker that reads in (interactive when it is a
// terminal) and asks on ask.
func newAsker(in io.Reader, ask io.Writer) *asker {
	return &asker{in: bufio.NewReader(in), interactive: isTerminal(in), ask: ask}
}

// isTerminal reports whether r is a character device, as a terminal is.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// errDeclined ends the questions: the user declined, or stdin ended.
var errDeclined = errors.New("declined")

// answer asks the user about elicitation req and returns the answer to
// send (without its session id), and why it was declined ("" when the
// user answered). It fails only with ctx's error.
func (a *asker) answer(ctx context.Context, req *acpv2.ElicitationRequest) (*acpv2.RespondElicitationRequest, string, error) {
	decline := &acpv2.RespondElicitationRequest{RequestId: req.GetRequestId(), Action: acpjson.ElicitDecline}
	if !a.interactive {
		return decline, "stdin is not a terminal", nil
	}
	mode := req.GetMode()
	if mode != acpjson.ElicitForm && mode != acpjson.ElicitURL {
		return decline, fmt.Sprintf("mode %q is not one try knows", printable(mode)), nil
	}
	fmt.Fprintf(a.ask, "\nThe agent asks (%s): %s\n", req.GetRequestId(), printable(req.GetMessage()))
	if mode == acpjson.ElicitURL {
		fmt.Fprintf(a.ask, "  open %s\n", printable(req.GetUrl()))
	}
	content, err := a.ask1(ctx, req)
	switch {
	case errors.Is(err, errDeclined):
		return decline, "as the user said", nil
	case err != nil:
		return nil, "", err
	}
	return &acpv2.RespondElicitationRequest{RequestId: req.GetRequestId(), Action: acpjson.ElicitAccept, Content: content}, "", nil
}

// ask1 asks accept or decline, then a form's properties: the content to
// accept with (nil for none), or errDeclined.
func (a *asker) ask1(ctx context.Context, req *acpv2.ElicitationRequest) (*structpb.Struct, error) {
	for {
		line, err := a.question(ctx, "[a]ccept or [d]ecline? ")
		if err != nil {
			return nil, err
		}
		switch strings.ToLower(line) {
		case "a", "accept":
			if req.GetMode() != acpjson.ElicitForm {
				return nil, nil
			}
			return a.form(ctx, req.GetRequestedSchema())
		case "d", "decline":
			return nil, errDeclined
		}
	}
}

// form asks each top-level property of schema, by name, until its answer
// fits the property's type (and enum); an optional one may be left empty.
func (a *asker) form(ctx context.Context, schema *structpb.Struct) (*structpb.Struct, error) {
	props := schema.GetFields()["properties"].GetStructValue().GetFields()
	required := map[string]bool{}
	for _, r := range schema.GetFields()["required"].GetListValue().GetValues() {
		required[r.GetStringValue()] = true
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	content := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, name := range names {
		prop := props[name].GetStructValue().GetFields()
		hint := propertyHint(prop)
		if required[name] {
			hint += ", required"
		}
		for {
			line, err := a.question(ctx, fmt.Sprintf("  %s (%s): ", printable(name), hint))
			if err != nil {
				return nil, err
			}
			if line == "" {
				if required[name] {
					fmt.Fprintf(a.ask, "  %s is required\n", printable(name))
					continue
				}
				break
			}
			v, err := propertyValue(prop, line)
			if err != nil {
				fmt.Fprintf(a.ask, "  %v\n", err)
				continue
			}
			content.Fields[name] = v
			break
		}
	}
	return content, nil
}

// propertyHint says what a property takes.
func propertyHint(prop map[string]*structpb.Value) string {
	typ := prop["type"].GetStringValue()
	switch typ {
	case "boolean":
		return "yes or no"
	case "array":
		if enum := enumOf(prop["items"].GetStructValue().GetFields()); enum != nil {
			return "comma-separated, of " + printable(strings.Join(enum, ", "))
		}
		return "comma-separated"
	case "integer":
		return "a whole number"
	case "number":
		return "a number"
	}
	if enum := enumOf(prop); enum != nil {
		return "one of " + printable(strings.Join(enum, ", "))
	}
	return "text"
}

// propertyValue is line as the value of property prop, or why it does
// not fit the property's type or enum.
func propertyValue(prop map[string]*structpb.Value, line string) (*structpb.Value, error) {
	switch typ := prop["type"].GetStringValue(); typ {
	case "number", "integer":
		n, err := strconv.ParseFloat(line, 64)
		if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, fmt.Errorf("want a number")
		}
		if typ == "integer" && n != math.Trunc(n) {
			return nil, fmt.Errorf("want a whole number")
		}
		return structpb.NewNumberValue(n), nil
	case "boolean":
		switch strings.ToLower(line) {
		case "y", "yes", "true":
			return structpb.NewBoolValue(true), nil
		case "n", "no", "false":
			return structpb.NewBoolValue(false), nil
		}
		return nil, fmt.Errorf("want yes or no")
	case "array":
		enum := enumOf(prop["items"].GetStructValue().GetFields())
		var items []*structpb.Value
		for item := range strings.SplitSeq(line, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			if enum != nil && !slices.Contains(enum, item) {
				return nil, fmt.Errorf("want items of %s", printable(strings.Join(enum, ", ")))
			}
			items = append(items, structpb.NewStringValue(item))
		}
		return structpb.NewListValue(&structpb.ListValue{Values: items}), nil
	}
	if enum := enumOf(prop); enum != nil && !slices.Contains(enum, line) {
		return nil, fmt.Errorf("want one of %s", printable(strings.Join(enum, ", ")))
	}
	return structpb.NewStringValue(line), nil
}

// enumOf returns the string values of prop's `enum`, nil without one.
func enumOf(prop map[string]*structpb.Value) []string {
	list := prop["enum"].GetListValue()
	if list == nil {
		return nil
	}
	out := []string{}
	for _, v := range list.GetValues() {
		out = append(out, v.GetStringValue())
	}
	return out
}

// question asks q and returns the line answered, trimmed: errDeclined at
// the end of stdin, ctx's error when it ends first (the read it leaves
// behind ends with the process).
func (a *asker) question(ctx context.Context, q string) (string, error) {
	fmt.Fprint(a.ask, q)
	type read struct {
		line string
		err  error
	}
	got := make(chan read, 1)
	go func() {
		line, err := a.in.ReadString('\n')
		got <- read{line, err}
	}()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case r := <-got:
		if r.err != nil && r.line == "" {
			fmt.Fprintln(a.ask)
			return "", errDeclined
		}
		return strings.TrimSpace(r.line), nil
	}
}

// printable is s with its control characters (an agent's terminal escape
// sequences among them) shown as spaces.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
