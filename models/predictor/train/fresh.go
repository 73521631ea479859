package train

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/phaseless/phaseless/models/grade"
	"github.com/phaseless/phaseless/models/textfeat"
)

// FreshFile is the project's own evaluation set in a routing data
// directory: short requests written the way people say them ("who wrote
// Hamlet", "make it warmer in here"), not generated from any training
// template, each with the grader's reference. Training never reads it.
//
// Format: one request a line, tab-separated: kind ("open" or "car"), the
// request, the reference in grade.Parse notation. Blank lines and lines
// starting with '#' are skipped.
const FreshFile = "fresh.tsv"

// DevFile is a second hand-written set in FreshFile's format, for
// development: feature, weight and threshold choices are judged on it (and
// on the validation split), so that the fresh set stays a test nobody
// tuned on. It was written after the fresh set, by a different session,
// without reading it; no request is in both (TestDevSetIsUnseen). Training
// never reads it either.
const DevFile = "dev.tsv"

// Sources of the fresh and the development sets.
const (
	SourceFreshOpen = "fresh-open" // open-domain questions: should go to the cloud
	SourceFreshCar  = "fresh-car"  // car commands: should stay on the device
	SourceDevOpen   = "dev-open"   // DevFile's open-domain questions
	SourceDevCar    = "dev-car"    // DevFile's car commands
)

// IsOpenSource reports whether a source holds the hand-written open-domain
// questions of the fresh or the development set.
func IsOpenSource(source string) bool { return source == SourceFreshOpen || source == SourceDevOpen }

// loadFresh reads a set in FreshFile's format; open and car name the
// sources its two kinds get.
func loadFresh(path, open, car string) ([]Example, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Example
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "\t")
		if len(parts) != 3 {
			return nil, fmt.Errorf("%s:%d: %d fields, want kind, request, reference", path, n, len(parts))
		}
		ref, err := grade.Parse(parts[2])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		e := Example{Text: parts[1], Features: textfeat.Extract(parts[1]), Ref: &ref, Group: parts[0]}
		switch parts[0] {
		case "open":
			e.Source, e.Label = open, 1
		case "car":
			e.Source, e.Label = car, 0
		default:
			return nil, fmt.Errorf("%s:%d: kind %q, want open or car", path, n, parts[0])
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
