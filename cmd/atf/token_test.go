package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/client"
)

// TestDevToken: `atf dev --token` refuses requests without the token, and the CLI sends it from
// --token or $ATF_TOKEN.
func TestDevToken(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t), "--token", "s3cret")
	var apiErr *client.Error
	if _, err := dev.client.Lambdas(t.Context()); !errors.As(err, &apiErr) || apiErr.Status != 401 {
		t.Fatalf("a request without the token: %v, want a 401", err)
	}
	cli := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(atfBin, append(args, "--endpoint", dev.client.Endpoint)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli(nil, "lambdas"); err == nil || !strings.Contains(out, "401") {
		t.Errorf("the CLI without the token: %v\n%s", err, out)
	}
	if out, err := cli(nil, "lambdas", "--token", "s3cret"); err != nil || !strings.Contains(out, "echo") {
		t.Errorf("the CLI with --token: %v\n%s", err, out)
	}
	if out, err := cli([]string{"ATF_TOKEN=s3cret"}, "lambdas"); err != nil || !strings.Contains(out, "echo") {
		t.Errorf("the CLI with $ATF_TOKEN: %v\n%s", err, out)
	}
}
