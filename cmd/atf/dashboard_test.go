package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestDashboardOnAWS: atf dashboard serves the dashboard's files, and its API calls through API
// Gateway's SigV4 check in front of atf dev, signed (a read, and a schedule with its body), behind
// atf dev's guards: the token, and the loopback Host and Origin checks. The charts' endpoint
// answers that it needs atf dev.
func TestDashboardOnAWS(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t))
	gw := newSigningGateway(t, dev.client.Endpoint)
	cmd := exec.Command(atfBin, "dashboard", "--endpoint", gw.URL, "--addr", "127.0.0.1:0", "--token", "dash-token")
	cmd.Env = sigV4Env(t)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("atf dashboard printed %q, %v; want its address", line, err)
	}
	base := m[1]
	call := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer dash-token")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for _, h := range header {
			k, v, _ := strings.Cut(h, ": ")
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if code, body := call("GET", "/", ""); code != 200 || !strings.Contains(body, "app.js") {
		t.Errorf("the page: %d %.200s", code, body)
	}
	if code, body := call("POST", "/v1/lambdas/echo/tasks", `{"id":"dash-1","payload":{"from":"dashboard"}}`); code != 201 || !strings.Contains(body, `"dash-1"`) {
		t.Errorf("a schedule through the dashboard: %d %s", code, body)
	}
	if code, body := call("GET", "/v1/lambdas", ""); code != 200 || !strings.Contains(body, `"echo"`) {
		t.Errorf("the lambdas through the dashboard: %d %s", code, body)
	}
	if got := waitTerminal(t, dev.client, "echo", "dash-1"); compact(got.Result) != `{"from":"dashboard"}` {
		t.Errorf("the task scheduled through the dashboard ran with %s", got.Result)
	}
	if code, body := call("GET", "/v1/dashboard/activity", ""); code != http.StatusNotImplemented || !strings.Contains(body, "run atf dev") {
		t.Errorf("the charts' endpoint: %d %s; want 501 saying it needs atf dev", code, body)
	}
	before := gw.through.Load()
	if code, _ := call("GET", "/v1/lambdas", "", "Authorization: Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("without the dashboard's token: %d, want 401", code)
	}
	if code, _ := call("GET", "/v1/lambdas", "", "Host: rebound.example:"+base[strings.LastIndex(base, ":")+1:]); code != http.StatusForbidden {
		t.Errorf("another Host: %d, want 403", code)
	}
	if code, _ := call("GET", "/v1/lambdas", "", "Origin: https://evil.example"); code != http.StatusForbidden {
		t.Errorf("another Origin: %d, want 403", code)
	}
	if gw.through.Load() != before {
		t.Errorf("a request the guards refused reached the API")
	}
}
