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

// Dev2File is a second development set in FreshFile's format, written for
// the router's fourth round: car commands in the words drivers use
// (synonyms, slang, indirect requests such as "brr it's chilly in here")
// and short open questions, none in another routing file. It is loaded
// into Data.Dev beside DevFile under its own sources, so that every choice
// made on the development set is made on both.
const Dev2File = "dev2.tsv"

// Fresh2File is a second held-out set in FreshFile's format, written for
// the router's third round before any result on it was seen: a check that
// what fresh.tsv measures is not particular to its requests. Training never
// reads it and no choice is made on it.
const Fresh2File = "fresh2.tsv"

// Fresh3File is a third held-out set in FreshFile's format, written for
// issue 35 after the router was frozen and committed before any router was
// scored on it. Training never reads it and no choice is made on it.
const Fresh3File = "fresh3.tsv"

// SpokenFile holds hand-written training requests in FreshFile's format
// (an open question may leave its reference out): open-domain questions
// and car commands in the forms people use, which the corpus's templates
// lack. An eighth goes to validation by hash, the rest to training.
const SpokenFile = "spoken.tsv"

// Sources of the fresh, the development and the spoken sets.
const (
	SourceFreshOpen  = "fresh-open"  // open-domain questions: should go to the cloud
	SourceFreshCar   = "fresh-car"   // car commands: should stay on the device
	SourceFresh2Open = "fresh2-open" // Fresh2File's open-domain questions
	SourceFresh2Car  = "fresh2-car"  // Fresh2File's car commands
	SourceFresh3Open = "fresh3-open" // Fresh3File's open-domain questions
	SourceFresh3Car  = "fresh3-car"  // Fresh3File's car commands
	SourceDevOpen    = "dev-open"    // DevFile's open-domain questions
	SourceDevCar     = "dev-car"     // DevFile's car commands
	SourceDev2Open   = "dev2-open"   // Dev2File's open-domain questions
	SourceDev2Car    = "dev2-car"    // Dev2File's car commands
	SourceSpokenOpen = "spoken-open" // SpokenFile's open-domain questions (cloud)
	SourceSpokenCar  = "spoken-car"  // SpokenFile's car commands
)

// IsOpenSource reports whether a source holds the hand-written open-domain
// questions of the fresh or the development set.
func IsOpenSource(source string) bool {
	return source == SourceFreshOpen || source == SourceDevOpen || source == SourceDev2Open
}

// IsDevSource reports whether a source is one of the development sets'
// (DevFile, Dev2File).
func IsDevSource(source string) bool {
	return source == SourceDevOpen || source == SourceDevCar || source == SourceDev2Open || source == SourceDev2Car
}

// loadFresh reads a set in FreshFile's format; open and car name the
// sources its two kinds get. With openNoRef an open question may have no
// reference (two fields).
func loadFresh(path, open, car string, openNoRef bool) ([]Example, error) {
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
		e := Example{}
		switch {
		case len(parts) == 2 && openNoRef && parts[0] == "open":
			// No reference: Reference reports none, the label is cloud.
		case len(parts) != 3:
			return nil, fmt.Errorf("%s:%d: %d fields, want kind, request, reference", path, n, len(parts))
		default:
			ref, err := grade.Parse(parts[2])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			e.Ref = &ref
		}
		e.Text, e.Features, e.Group = parts[1], textfeat.ExtractLeaveOut(parts[1]), parts[0]
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
