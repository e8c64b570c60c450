package merge_test

import (
	"fmt"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

func Example() {
	s := merge.New()
	_, _ = s.ApplyUpdate(&acpv2.ToolCallUpdate{
		ToolCallId: "call_1",
		Title:      &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "Run tests"}},
		Kind:       &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "execute"}},
	})
	_, _ = s.ApplyChunk(&acpv2.ToolCallContentChunk{
		ToolCallId: "call_1",
		Content: &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Terminal{
			Terminal: &acpv2.Terminal{TerminalId: "term_1"},
		}},
	})
	tc, _ := s.ApplyUpdate(&acpv2.ToolCallUpdate{
		ToolCallId: "call_1",
		Status:     &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "completed"}},
	})
	fmt.Println(tc.GetTitle(), tc.GetKind(), tc.GetStatus(), len(tc.GetContent()), s.Len())
	// Output: Run tests execute completed 1 1
}
