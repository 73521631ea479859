//go:build lm_nojinja

package lm

// Built with lm_nojinja (the size-budgeted ARM agent: the Jinja engine and
// its dependencies cost 7.1 MiB there, docs/engine.md), models' chat
// templates are not rendered; Model.ChatTemplateSkipped reports it.
const rendersTemplates = false

func compileChatTemplate(string, string, string) (chatRenderer, error) { return nil, nil }
