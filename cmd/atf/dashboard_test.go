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
	base, _ := startDashboard(t, gw, "--token", "dash-token")
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

// TestDashboardMakesToken: without --token or ATF_TOKEN, atf dashboard on loopback makes a token
// and prints it: a call without it is refused 401 before it is signed (another user or process
// of the machine cannot use the operator's credentials), a call with it goes through.
func TestDashboardMakesToken(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t))
	gw := newSigningGateway(t, dev.client.Endpoint)
	base, out := startDashboard(t, gw)
	call := func(token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", base+"/v1/lambdas", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := call(""); code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", code) // and no token line to wait for
	}
	if gw.through.Load() != 0 {
		t.Errorf("a call without the token reached the API, signed")
	}
	line, err := out.ReadString('\n')
	m := regexp.MustCompile(`^token \(the page asks for it\): (\S+)\n$`).FindStringSubmatch(line)
	if err != nil || m == nil || len(m[1]) < 20 {
		t.Fatalf("atf dashboard printed %q, %v; want the token it made", line, err)
	}
	if code := call(m[1]); code != http.StatusOK {
		t.Errorf("with the printed token: %d, want 200", code)
	}
}

// startDashboard starts atf dashboard on loopback in front of gw, signing as sigV4Env, with args
// and no ATF_TOKEN. It returns its address and the rest of its output, after the line that gave
// the address.
func startDashboard(t *testing.T, gw *signingGateway, args ...string) (base string, out *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(atfBin, append([]string{"dashboard", "--endpoint", gw.URL, "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(sigV4Env(t), "ATF_TOKEN=")
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
	out = bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	m := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("atf dashboard printed %q, %v; want its address", line, err)
	}
	return m[1], out
}
