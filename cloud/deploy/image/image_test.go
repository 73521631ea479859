package image

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// fakeBinaries copies this test's own executable under the binaries' names:
// a real static-enough ELF file, without building the cloud here.
func fakeBinaries(t *testing.T, names ...string) []string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// checkImage validates every digest and size of img (go-containerregistry's
// validate.Image, as a registry would on push) and checks what a runtime
// reads: the entrypoint, the user, and the binaries in the layer byte for byte.
func checkImage(t *testing.T, img v1.Image, bins []string, entry string) {
	t.Helper()
	if err := validate.Image(img); err != nil {
		t.Fatalf("invalid image: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/usr/local/bin/"+entry {
		t.Errorf("entrypoint %v", got)
	}
	if cf.Config.User != User || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("config %+v", cf)
	}
	if _, ok := cf.Config.ExposedPorts["4433/udp"]; !ok {
		t.Errorf("ports %v", cf.Config.ExposedPorts)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	modes := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name], modes[h.Name] = b, h.Mode
		if h.Name == "var/lib/phaseless/" && h.Uid != 65532 {
			t.Errorf("data dir owned by %d", h.Uid)
		}
	}
	for _, b := range bins {
		want, _ := os.ReadFile(b)
		name := "usr/local/bin/" + filepath.Base(b)
		if !bytes.Equal(files[name], want) || modes[name]&0o111 == 0 {
			t.Errorf("%s: %d bytes, mode %o in the layer; want the %d-byte executable", name, len(files[name]), modes[name], len(want))
		}
	}
}

func TestImageLayoutAndTarball(t *testing.T) {
	bins := fakeBinaries(t, "phaseless-cloud", "phaselessctl")
	cfg := Config{Binaries: bins, Entrypoint: "phaseless-cloud", Ports: []string{"8080/tcp", "4433/udp"}, Labels: map[string]string{"org.opencontainers.image.version": "test"}}
	img, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, img, bins, "phaseless-cloud")

	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, "phaseless-cloud:test", img); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("invalid OCI layout: %v", err)
	}
	man, _ := idx.IndexManifest()
	if len(man.Manifests) != 1 || man.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "phaseless-cloud:test" {
		t.Fatalf("index %+v", man.Manifests)
	}
	fromLayout, err := idx.Image(man.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, fromLayout, bins, "phaseless-cloud")

	file := filepath.Join(t.TempDir(), "phaseless-cloud.tar")
	if err := WriteTarball(file, "phaseless/phaseless-cloud:test", img); err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, fromTar, bins, "phaseless-cloud")

	// Same inputs, same digest: the build is reproducible.
	again, _ := Build(cfg)
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("digests differ between identical builds: %s %s", d1, d2)
	}
	if _, err := Build(Config{Binaries: bins, Entrypoint: "phaseless-agent"}); err == nil {
		t.Error("an entrypoint that is not among the binaries was accepted")
	}
	if _, err := Build(Config{Binaries: bins, Entrypoint: "phaseless-cloud", Created: time.Unix(1, 0)}); err != nil {
		t.Error(err)
	}
}
