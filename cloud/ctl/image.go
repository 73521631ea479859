package ctl

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/phaseless/phaseless/cloud/deploy/image"
	"github.com/phaseless/phaseless/internal/cli"
)

func init() {
	register(&cli.Command{
		Name:    "image",
		Summary: "container images without a registry or Docker engine",
		Subcommands: []*cli.Command{
			{Name: "build", Summary: "put static binaries on an empty base: an OCI layout (--oci DIR) and/or a docker-archive (--tar FILE)", Run: imageBuild},
		},
	})
}

func imageBuild(_ context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("image build", flag.ContinueOnError)
	entry := fs.String("entrypoint", "", "base name of the binary the image runs (default: the first binary's)")
	ref := fs.String("ref", "", "image reference, e.g. phaseless/phaseless-cloud:1.2 (default: the entrypoint's name :latest)")
	ociDir := fs.String("oci", "", "write (or add to) an OCI image layout in this directory")
	tarFile := fs.String("tar", "", "write a docker-archive tarball (docker load, podman load)")
	arch := fs.String("arch", "amd64", "GOARCH the binaries were built for")
	ports := fs.String("ports", "", "exposed ports, comma-separated, e.g. 8080/tcp,4433/udp,1883/tcp")
	version := fs.String("version", "", "org.opencontainers.image.version label")
	if err := cli.ParseVerb(fs, cio, args, "image build [--entrypoint NAME] [--oci DIR] [--tar FILE] BINARY [BINARY]"); err != nil {
		return err
	}
	if fs.NArg() == 0 || (*ociDir == "" && *tarFile == "") {
		return fmt.Errorf("%w: image build [--entrypoint NAME] [--oci DIR] [--tar FILE] BINARY [BINARY]", cli.ErrUsage)
	}
	cfg := image.Config{Binaries: fs.Args(), Entrypoint: *entry, Arch: *arch}
	if cfg.Entrypoint == "" {
		cfg.Entrypoint = filepath.Base(fs.Arg(0))
	}
	if *ports != "" {
		cfg.Ports = strings.Split(*ports, ",")
	}
	if *version != "" {
		cfg.Labels = map[string]string{"org.opencontainers.image.version": *version}
	}
	if *ref == "" {
		*ref = "phaseless/" + cfg.Entrypoint + ":latest"
	}
	img, err := image.Build(cfg)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if *ociDir != "" {
		if err := image.WriteLayout(*ociDir, *ref, img); err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "%s %s → OCI layout %s\n", *ref, digest, *ociDir)
	}
	if *tarFile != "" {
		if err := image.WriteTarball(*tarFile, *ref, img); err != nil {
			return err
		}
		fmt.Fprintf(cio.Stdout, "%s %s → %s\n", *ref, digest, *tarFile)
	}
	return nil
}
