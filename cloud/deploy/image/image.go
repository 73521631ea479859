// Package image builds the cloud's container images without a registry, a
// base image or a Docker engine: the static binaries go into one layer on an
// empty base, and the result is written as an OCI image layout (a directory
// that podman, skopeo, containerd and crane read) and as a docker-archive
// tarball (docker load). phaselessctl image build and make image call it.
package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BinDir is where the binaries live inside the image.
const BinDir = "/usr/local/bin"

// DataDir is the image's writable state directory, owned by User.
const DataDir = "/var/lib/phaseless"

// User is the numeric user the processes run as: the image has no
// /etc/passwd, and a number needs none (65532 is distroless's "nonroot").
const User = "65532:65532"

// Config describes one image.
type Config struct {
	// Binaries are host paths of static executables, copied to BinDir
	// under their base names.
	Binaries []string
	// Entrypoint is the base name of the binary the image runs.
	Entrypoint string
	// Cmd are the entrypoint's default arguments.
	Cmd []string
	// Ports are exposed ports, e.g. "8080/tcp", "4433/udp".
	Ports []string
	// Arch is the GOARCH the binaries were built for (default amd64).
	Arch string
	// Created stamps the image; zero gives the Unix epoch, so the same
	// binaries always give the same image digest.
	Created time.Time
	// Labels are OCI annotations on the config, e.g. the version.
	Labels map[string]string
}

// Build assembles the image.
func Build(cfg Config) (v1.Image, error) {
	if len(cfg.Binaries) == 0 {
		return nil, errors.New("image: no binaries")
	}
	if cfg.Arch == "" {
		cfg.Arch = "amd64"
	}
	found := false
	for _, b := range cfg.Binaries {
		found = found || filepath.Base(b) == cfg.Entrypoint
	}
	if !found {
		return nil, fmt.Errorf("image: entrypoint %q is not one of the binaries %v", cfg.Entrypoint, cfg.Binaries)
	}
	layerTar, err := rootfs(cfg.Binaries, cfg.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	// A tarball layer's descriptor carries an empty (not nil) annotation
	// map, which the manifest's JSON drops, and validate.Image then reports
	// the manifest as inconsistent; naming the layer gives a real map.
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: layer, Annotations: map[string]string{"org.opencontainers.image.title": "phaseless binaries"},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = cfg.Arch, "linux"
	cf.Created = v1.Time{Time: cfg.Created.UTC()}
	cf.Config.Entrypoint = []string{path.Join(BinDir, cfg.Entrypoint)}
	cf.Config.Cmd = cfg.Cmd
	cf.Config.User = User
	cf.Config.WorkingDir = DataDir
	cf.Config.Env = []string{"PATH=" + BinDir, "PHASELESS_DATA_DIR=" + DataDir}
	cf.Config.Labels = cfg.Labels
	if len(cfg.Ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range cfg.Ports {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the one layer: the binaries, the data directory owned by User,
// and a sticky /tmp, with fixed times so that builds are reproducible.
func rootfs(binaries []string, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: created, Format: tar.FormatPAX})
	}
	for _, d := range []struct {
		name string
		mode int64
		uid  int
	}{{"usr", 0o755, 0}, {"usr/local", 0o755, 0}, {"usr/local/bin", 0o755, 0}, {"var", 0o755, 0}, {"var/lib", 0o755, 0}, {"var/lib/phaseless", 0o700, 65532}, {"tmp", 0o1777, 0}} {
		if err := dir(d.name, d.mode, d.uid); err != nil {
			return nil, err
		}
	}
	for _, b := range binaries {
		data, err := os.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(BinDir[1:], filepath.Base(b)), Mode: 0o755, Size: int64(len(data)), ModTime: created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as an OCI image layout in dir (created, or added to
// when it already holds one), tagged ref in its index annotations.
func WriteLayout(dir, ref string, img v1.Image) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("image: layout %s: %w", dir, err)
		}
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref}))
}

// WriteTarball writes img as a docker-archive tarball tagged ref, which
// `docker load` and `podman load` read.
func WriteTarball(file, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: reference %q: %w", ref, err)
	}
	return tarball.WriteToFile(file, tag, img)
}
