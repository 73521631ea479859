//go:build !lm_nojinja

package lm

import "github.com/phaseless/phaseless/models/lm/chattmpl"

func compileChatTemplate(src, bos, eos string) (chatRenderer, error) {
	return chattmpl.Parse(src, bos, eos)
}
