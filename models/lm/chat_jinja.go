//go:build !lm_nojinja

package lm

import "github.com/phaseless/phaseless/models/lm/chattmpl"

// rendersTemplates: this build renders models' chat templates.
const rendersTemplates = true

func compileChatTemplate(src, bos, eos string) (chatRenderer, error) {
	return chattmpl.Parse(src, bos, eos)
}
