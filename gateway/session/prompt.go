package session

import (
	"fmt"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// checkPrompt refuses, as ErrInvalid, a prompt holding a content block the
// agent did not offer to take (its promptCapabilities): image, audio or an
// embedded resource. Text and resource links are baseline, and a block of
// a type the gateway does not know is the client's to send.
func checkPrompt(caps agent.PromptCapabilities, prompt []*acpv2.ContentBlock) error {
	for i, b := range prompt {
		var kind, capability string
		switch {
		case b.GetImage() != nil && !caps.Image:
			kind, capability = "an image", "image"
		case b.GetAudio() != nil && !caps.Audio:
			kind, capability = "an audio", "audio"
		case b.GetResource() != nil && !caps.EmbeddedContext:
			kind, capability = "an embedded resource (resource)", "embeddedContext"
		default:
			continue
		}
		return fmt.Errorf("%w: prompt[%d] is %s block, which this agent does not take (it does not offer promptCapabilities.%s)", ErrInvalid, i, kind, capability)
	}
	return nil
}
