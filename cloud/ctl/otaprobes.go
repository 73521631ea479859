package ctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/grade"
)

// otaProbes is `ota probes`: the signed probe sets a model or router
// update carries as probes.json, so a device commits it only if it answers
// them about as well as the artifact in force (agent/probegate).
var otaProbes = &cli.Command{
	Name:    "probes",
	Summary: "signed probe sets that gate a model or router update on the device: sign, verify",
	Subcommands: []*cli.Command{
		{Name: "sign", Summary: "sign a probe set from a JSONL file of {\"prompt\",\"expect\"} lines", Run: otaProbesSign},
		{Name: "verify", Summary: "verify a signed probe set as a device would and list it", Run: otaProbesVerify},
	},
}

func otaProbesSign(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("ota probes sign", flag.ContinueOnError)
	keyPath := fs.String("key", "ota-key.pem", "signing key from ota keygen (the fleet's: devices verify the set with --ota-pub)")
	name := fs.String("name", "", "the probe set's name, shown with its scores")
	margin := fs.Float64("margin", 0, "how much lower (mean grade score, 0..1) the candidate may score than the artifact in force and still commit")
	maxTokens := fs.Int("max-tokens", 0, "tokens of each language-model answer (0 = 96)")
	out := fs.String("out", firmware.ProbeSetFile, "output file; put it in a bundle as probes.json: ota sign ... probes.json=FILE")
	usage := "ota probes sign [--key K] [--margin M] [--max-tokens N] [--name NAME] [--out FILE] PROBES.jsonl"
	if err := cli.ParseVerb(fs, cio, args, usage); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: %s", cli.ErrUsage, usage)
	}
	key, err := firmware.ReadPrivateKey(*keyPath)
	if err != nil {
		return err
	}
	probes, err := readProbes(fs.Arg(0))
	if err != nil {
		return err
	}
	raw, err := firmware.SignProbeSet(key, firmware.ProbeSet{Name: *name, Margin: *margin, MaxTokens: *maxTokens, Probes: probes})
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, raw, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(cio.Stdout, "wrote %s: %d probes, margin %g\n", *out, len(probes), *margin)
	return nil
}

// readProbes reads a JSONL file of probes and checks every expectation
// parses: a device refuses a set with one that does not, and with it the
// update.
func readProbes(path string) ([]firmware.Probe, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probes []firmware.Probe
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var p firmware.Probe
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if _, err := grade.Parse(p.Expect); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		probes = append(probes, p)
	}
	return probes, sc.Err()
}

func otaProbesVerify(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("ota probes verify", flag.ContinueOnError)
	pubPath := fs.String("pub", "ota-pub.pem", "trusted public key")
	usage := "ota probes verify [--pub P] FILE"
	if err := cli.ParseVerb(fs, cio, args, usage); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: %s", cli.ErrUsage, usage)
	}
	pub, err := firmware.ReadPublicKey(*pubPath)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	set, err := firmware.OpenProbeSet(raw, pub)
	if err != nil {
		return err
	}
	for i, p := range set.Probes {
		if _, err := grade.Parse(p.Expect); err != nil {
			return fmt.Errorf("probe %d: %w", i+1, err)
		}
	}
	fmt.Fprintf(cio.Stdout, "ok: probe set %q, %d probes, margin %g, %d tokens an answer\n", set.Name, len(set.Probes), set.Margin, set.Tokens())
	return nil
}
