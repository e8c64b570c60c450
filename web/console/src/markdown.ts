// Agent text as markdown: parsed by marked (raw HTML in it shown as text),
// sanitised by DOMPurify (no script, no event handler, no style, no form,
// no javascript: link), code blocks highlighted by
// highlight.js for a few common languages. The page's CSP forbids inline
// script and remote images as a second line of defence.
import { Marked } from "marked";
import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import diff from "highlight.js/lib/languages/diff";
import go from "highlight.js/lib/languages/go";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import typescript from "highlight.js/lib/languages/typescript";
import yaml from "highlight.js/lib/languages/yaml";

hljs.registerLanguage("bash", bash);
hljs.registerLanguage("diff", diff);
hljs.registerLanguage("go", go);
hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("json", json);
hljs.registerLanguage("python", python);
hljs.registerLanguage("typescript", typescript);
hljs.registerLanguage("yaml", yaml);
hljs.registerAliases(["sh", "shell", "console"], { languageName: "bash" });
hljs.registerAliases(["golang"], { languageName: "go" });
hljs.registerAliases(["js", "mjs"], { languageName: "javascript" });
hljs.registerAliases(["ts", "tsx"], { languageName: "typescript" });
hljs.registerAliases(["py"], { languageName: "python" });
hljs.registerAliases(["yml"], { languageName: "yaml" });

// Raw HTML in markdown is shown as the text it is, not parsed: agents
// write markdown, and HTML in it is more often quoted than meant. (Parsing
// it, even inertly, would also trip the page's CSP on inline handlers.)
const marked = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  renderer: {
    html: ({ text }) => escapeHTML(text),
  },
});

function escapeHTML(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

const purify = DOMPurify(window);
// Links leave the page in a new tab, without the opener or a referrer.
purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const purifyConfig = {
  RETURN_DOM_FRAGMENT: true as const,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style"],
};

/** markdown renders s into a sanitised fragment of elements. */
export function markdown(s: string): DocumentFragment {
  const html = marked.parse(s) as string;
  const frag = purify.sanitize(html, purifyConfig);
  for (const code of frag.querySelectorAll<HTMLElement>("pre > code")) highlight(code);
  for (const table of frag.querySelectorAll("table")) {
    // A wide table scrolls by itself, not the page.
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    table.replaceWith(wrap);
    wrap.append(table);
  }
  return frag;
}

// highlight colours a code block whose fence names a known language. hljs
// escapes the text it is given, so its output is safe as HTML.
function highlight(code: HTMLElement): void {
  const lang = [...code.classList].find((c) => c.startsWith("language-"))?.slice("language-".length);
  if (!lang || !hljs.getLanguage(lang)) return;
  const text = code.textContent ?? "";
  code.innerHTML = hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
  code.classList.add("hljs");
}
