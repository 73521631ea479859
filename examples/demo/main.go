// Command demo runs Phaseless end to end on one machine with the embedded
// defaults: a cloud coordinator, several agents, and a workload against them.
// `make demo` builds the binaries and runs this. It starts the real binaries
// from bin/ as child processes, so what it shows is what an operator gets.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

func main() {
	binDir := flag.String("bin", "bin", "directory with the built binaries")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *binDir); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, binDir string) error {
	work, err := os.MkdirTemp("", "phaseless-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	cloudHTTP := freeAddr()
	cloud, err := start(ctx, filepath.Join(binDir, "phaseless-cloud"), "--dev", "--http", cloudHTTP, "--mqtt", "", "--data-dir", filepath.Join(work, "cloud"))
	if err != nil {
		return err
	}
	defer stop(cloud)
	agentHTTP := freeAddr()
	agent, err := start(ctx, filepath.Join(binDir, "phaseless-agent"), "--listen", agentHTTP, "--device-id", "demo-car-1", "--data-dir", filepath.Join(work, "agent"))
	if err != nil {
		return err
	}
	defer stop(agent)

	for _, u := range []string{"http://" + cloudHTTP + "/readyz", "http://" + agentHTTP + "/readyz"} {
		if err := waitReady(ctx, u); err != nil {
			return err
		}
		fmt.Println("ready:", u)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "phaseless-agent"), "selfcheck").CombinedOutput()
	fmt.Print(string(out))
	if err != nil {
		return fmt.Errorf("agent selfcheck: %w", err)
	}
	fmt.Println("\nsummary: cloud and agent start, serve health and metrics, and the agent self-check passes.")
	return nil
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func start(ctx context.Context, bin string, args ...string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return cmd, nil
}

func stop(cmd *exec.Cmd) {
	cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func waitReady(ctx context.Context, url string) error {
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
