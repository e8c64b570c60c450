package bridge

import (
	"strings"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// Diffs differ between the versions: v1 has the whole texts (path,
// oldText, newText), v2 the changes (paths and operations) and, optionally,
// a git patch. The editor gets the form of its version, as far as it can be
// made:
//
//   - v1: a v2 diff whose v1 members are set too is sent with those alone.
//     Otherwise each added file whose whole text the git patch holds
//     becomes a v1 diff without oldText; what is left (modified, deleted,
//     moved or copied files, whose whole texts a patch does not hold, and
//     anything without a patch section) becomes one text content item: the
//     operations and paths, then the patch sections in a ```diff block.
//   - v2: a v1 diff gets `changes` (one `add` without oldText, else
//     `modify`, of its path) and keeps its v1 members beside them.

// v1Content returns items with their v2 diffs in v1's form, and whether it
// changed any.
func v1Content(items []*acpv2.ToolCallContent) ([]*acpv2.ToolCallContent, bool) {
	return mapContent(items, func(item *acpv2.ToolCallContent) ([]*acpv2.ToolCallContent, bool) {
		d := item.GetDiff()
		if d == nil || len(d.GetChanges()) == 0 && d.GetPatch() == nil {
			return nil, false
		}
		return v1Diff(item), true
	})
}

// mapContent returns items with each item that conv converts (ok) replaced
// by what it makes of it, none or several, and whether it replaced any;
// items itself, not a copy, when it did not.
func mapContent(items []*acpv2.ToolCallContent, conv func(*acpv2.ToolCallContent) ([]*acpv2.ToolCallContent, bool)) ([]*acpv2.ToolCallContent, bool) {
	var out []*acpv2.ToolCallContent
	for i, item := range items {
		made, ok := conv(item)
		if !ok {
			if out != nil {
				out = append(out, item)
			}
			continue
		}
		if out == nil {
			out = append(make([]*acpv2.ToolCallContent, 0, len(items)), items[:i]...)
		}
		out = append(out, made...)
	}
	if out == nil {
		return items, false
	}
	return out, true
}

// v1Diff returns the v1 items that v2 diff item stands for.
func v1Diff(item *acpv2.ToolCallContent) []*acpv2.ToolCallContent {
	d := item.GetDiff()
	if d.Path != nil && d.NewText != nil {
		return []*acpv2.ToolCallContent{{
			Item: &acpv2.ToolCallContent_Diff{Diff: &acpv2.Diff{Path: d.Path, OldText: d.OldText, NewText: d.NewText}},
			Meta: item.GetMeta(),
		}}
	}
	var sections []patchSection
	if d.GetPatch().GetFormat() == "git_patch" {
		sections = splitGitPatch(d.GetPatch().GetText())
	}
	used := make([]bool, len(sections))
	var out []*acpv2.ToolCallContent
	var text strings.Builder
	for _, c := range d.GetChanges() {
		if c.GetOperation() == "add" {
			if i := sectionOf(sections, used, c.GetPath()); i >= 0 {
				if newText, ok := sections[i].newFile(); ok {
					used[i] = true
					path := c.GetPath()
					out = append(out, &acpv2.ToolCallContent{
						Item: &acpv2.ToolCallContent_Diff{Diff: &acpv2.Diff{Path: &path, NewText: &newText}},
						Meta: item.GetMeta(),
					})
					continue
				}
			}
		}
		text.WriteString(c.GetOperation())
		if c.OldPath != nil {
			text.WriteString(" " + c.GetOldPath() + " ->")
		}
		text.WriteString(" " + c.GetPath() + "\n")
	}
	var rest strings.Builder
	for i, s := range sections {
		if !used[i] {
			rest.WriteString(s.text)
		}
	}
	if p := d.GetPatch(); p != nil && sections == nil {
		rest.WriteString(p.GetText()) // a format other than git_patch, as it is
	}
	if rest.Len() > 0 {
		if text.Len() > 0 {
			text.WriteString("\n")
		}
		patch := rest.String()
		if !strings.HasSuffix(patch, "\n") {
			patch += "\n"
		}
		text.WriteString("```diff\n" + patch + "```\n")
	}
	if text.Len() > 0 {
		out = append(out, &acpv2.ToolCallContent{
			Item: &acpv2.ToolCallContent_Content{Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{
				Text: &acpv2.TextContent{Text: text.String()}}}},
			Meta: item.GetMeta(),
		})
	}
	return out
}

// patchSection is one `diff --git` section of a git patch.
type patchSection struct {
	// text is the section, its lines with their newlines.
	text string
	// path is the path it names after the change (before it, for a
	// deleted file), without Git's a/ or b/ prefix.
	path string
}

// splitGitPatch splits a git patch into its `diff --git` sections; text
// before the first is left out.
func splitGitPatch(patch string) []patchSection {
	var out []patchSection
	for rest := patch; rest != ""; {
		start := strings.Index(rest, "diff --git ")
		if start < 0 || start > 0 && rest[start-1] != '\n' {
			break
		}
		rest = rest[start:]
		end := strings.Index(rest[1:], "\ndiff --git ")
		text := rest
		if end >= 0 {
			text = rest[:end+2]
		}
		rest = rest[len(text):]
		s := patchSection{text: text}
		for line := range strings.Lines(text) {
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "+++ ") && line != "+++ /dev/null":
				s.path = trimGitPrefix(line[4:], "b/")
			case strings.HasPrefix(line, "--- ") && line != "--- /dev/null" && s.path == "":
				s.path = trimGitPrefix(line[4:], "a/")
			}
			if strings.HasPrefix(line, "@@") {
				break
			}
		}
		out = append(out, s)
	}
	return out
}

func trimGitPrefix(path, prefix string) string {
	return strings.TrimSuffix(strings.TrimPrefix(path, prefix), "\t")
}

// sectionOf returns the index of the unused section for path, or -1. A
// patch's paths are absolute, written after Git's a/ or b/ with or without
// their leading slash.
func sectionOf(sections []patchSection, used []bool, path string) int {
	for i, s := range sections {
		if !used[i] && strings.TrimPrefix(s.path, "/") == strings.TrimPrefix(path, "/") {
			return i
		}
	}
	return -1
}

// newFile returns the whole text of the file a section adds, and false
// when the section adds no file or does not hold all of it (a binary
// file, lines other than added ones).
func (s patchSection) newFile() (string, bool) {
	var text strings.Builder
	added, inHunk := false, false
	for line := range strings.Lines(s.text) {
		switch {
		case !inHunk && (strings.HasPrefix(line, "new file mode") || line == "--- /dev/null\n"):
			added = true
		case !inHunk && (strings.HasPrefix(line, "GIT binary patch") || strings.HasPrefix(line, "Binary files ")):
			return "", false
		case strings.HasPrefix(line, "@@"):
			inHunk = true
		case inHunk && strings.HasPrefix(line, "+"):
			text.WriteString(line[1:])
		case inHunk && strings.HasPrefix(line, `\`):
			// "\ No newline at end of file": the line before has none.
			t := strings.TrimSuffix(text.String(), "\n")
			text.Reset()
			text.WriteString(t)
		case inHunk:
			return "", false
		}
	}
	return text.String(), added
}

// v2Content returns items with their v1 diffs given v2's `changes`, and
// whether it changed any.
func v2Content(items []*acpv2.ToolCallContent) ([]*acpv2.ToolCallContent, bool) {
	return mapContent(items, func(item *acpv2.ToolCallContent) ([]*acpv2.ToolCallContent, bool) {
		d := item.GetDiff()
		if d == nil || d.Path == nil || len(d.GetChanges()) > 0 {
			return nil, false
		}
		op := "modify"
		if d.OldText == nil {
			op = "add"
		}
		c := proto.Clone(item).(*acpv2.ToolCallContent)
		c.GetDiff().Changes = []*acpv2.DiffChange{{Operation: op, Path: d.Path}}
		return []*acpv2.ToolCallContent{c}, true
	})
}

// v2Patch returns p with its content's v1 diffs given v2's changes.
func v2Patch(p *acpv2.ToolCallUpdate) *acpv2.ToolCallUpdate {
	items, changed := v2Content(p.GetContent().GetValue().GetItems())
	if !changed {
		return p
	}
	q := proto.Clone(p).(*acpv2.ToolCallUpdate)
	q.GetContent().GetValue().Items = items
	return q
}

// v2Chunk returns c with its v1 diff given v2's changes.
func v2Chunk(c *acpv2.ToolCallContentChunk) *acpv2.ToolCallContentChunk {
	items, changed := v2Content([]*acpv2.ToolCallContent{c.GetContent()})
	if !changed {
		return c
	}
	q := proto.Clone(c).(*acpv2.ToolCallContentChunk)
	q.Content = items[0]
	return q
}
