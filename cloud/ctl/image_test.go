package ctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// phaselessctl image build writes an OCI layout whose image runs the binary.
func TestImageBuildCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "phaselessctl")
	if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	oci := filepath.Join(dir, "oci")
	out, err := runCtl(t, "image", "build", "--oci", oci, "--ref", "phaseless/phaselessctl:t", bin)
	if err != nil || !strings.Contains(out, "phaseless/phaselessctl:t sha256:") {
		t.Fatalf("%q %v", out, err)
	}
	idx, err := layout.ImageIndexFromPath(oci)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	img, _ := idx.Image(m.Manifests[0].Digest)
	cf, _ := img.ConfigFile()
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/local/bin/phaselessctl" {
		t.Errorf("entrypoint %v", cf.Config.Entrypoint)
	}
	if _, err := runCtl(t, "image", "build", bin); err == nil {
		t.Error("no output given and no error")
	}
}
