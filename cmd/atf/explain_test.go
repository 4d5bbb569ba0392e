package main

import (
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// TestErrorsSayWhatToDo: a 401 names --token and ATF_TOKEN, not the header; a refused connection
// names --endpoint and ATF_ENDPOINT.
func TestErrorsSayWhatToDo(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: "echo"}.WithDefaults()}})
	srv := httptest.NewServer(httpapi.Guard(httpapi.New(svc, nil), nil, "s3cret"))
	t.Cleanup(srv.Close)
	_, err = runCLI(t, "lambdas", "--endpoint", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "--token") || !strings.Contains(err.Error(), "ATF_TOKEN") || strings.Contains(err.Error(), "Bearer") {
		t.Errorf("no token: %v, want an error naming --token and ATF_TOKEN", err)
	}
	if _, err := runCLI(t, "lambdas", "--endpoint", srv.URL, "--token", "wrong"); err == nil || !strings.Contains(err.Error(), "refused the token") {
		t.Errorf("a wrong token: %v, want an error saying the token was refused", err)
	}
	if _, err := runCLI(t, "lambdas", "--endpoint", srv.URL, "--token", "s3cret"); err != nil {
		t.Errorf("the token: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	if _, err := runCLI(t, "lambdas", "--endpoint", closed); err == nil || !strings.Contains(err.Error(), "--endpoint") || !strings.Contains(err.Error(), "ATF_ENDPOINT") {
		t.Errorf("nothing listening: %v, want an error naming --endpoint and ATF_ENDPOINT", err)
	}
}
