package main

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// sawWriter closes saw once what it is given holds want.
type sawWriter struct {
	mu   sync.Mutex
	text strings.Builder
	want string
	saw  chan struct{}
}

func (w *sawWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.text.String(), w.want)
	w.text.Write(p)
	if !had && strings.Contains(w.text.String(), w.want) {
		close(w.saw)
	}
	return len(p), nil
}

// TestDevWaitsForItsBackends: `atf dev --backend aws --create` started while SQS is out of reach
// says what it waits for and goes on once SQS is up, rather than exiting.
func TestDevWaitsForItsBackends(t *testing.T) {
	sqsAt := awstestEndpoint(t, "SQS")
	name := awstest.Name("atf-wait")
	awstest.Cleanup(t, name)
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := down.Addr().String()
	down.Close() // nothing listens there until the test says so
	t.Setenv("AWS_ENDPOINT_URL_SQS", "http://"+addr)
	defer func(first time.Duration) { backendRetryFirst = first }(backendRetryFirst)
	backendRetryFirst = 10 * time.Millisecond

	w := &sawWriter{want: "waiting for SQS at http://" + addr + ": connection refused", saw: make(chan struct{})}
	b := awsBackend{Table: name, Prefix: name, Create: true}
	opened := make(chan error, 1)
	go func() {
		_, _, err := b.open(t.Context(), []task.Lambda{task.Lambda{Name: "echo"}.WithDefaults()}, slog.New(slog.NewTextHandler(w, nil)))
		opened <- err
	}()
	select {
	case <-w.saw:
	case err := <-opened:
		t.Fatalf("open with SQS out of reach ended: %v; log:\n%s", err, w.text.String())
	}

	// SQS comes up: a proxy to the emulator on the address atf dev calls.
	up, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go proxy(up, sqsAt)
	if err := <-opened; err != nil {
		t.Fatalf("open once SQS is up: %v", err)
	}
}

// awstestEndpoint is the host:port of the emulator of service.
func awstestEndpoint(t *testing.T, service string) string {
	awstest.Config(t, service)
	u := endpointOf(service)
	return strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
}

// proxy forwards every connection ln accepts to addr.
func proxy(ln net.Listener, addr string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer out.Close()
			go io.Copy(out, in)
			io.Copy(in, out)
		}()
	}
}
