package ecsexecutor_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/ecsexecutor"
	"github.com/openatf/atf/shared/worker"
)

// getenv reads from a map, for ecsexecutor.Load.
func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// handlersDir writes executable scripts, name to body, into a new folder.
func handlersDir(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := handlersDir(t, map[string]string{"nap.sh": "cat", "other": "cat"})
	base := map[string]string{
		awsfn.EnvTable: "t", awsfn.EnvQueuePrefix: "p", awsfn.EnvLambda: "nap", ecsexecutor.EnvHandlers: dir,
		awsfn.EnvLambdas: `[{"name":"nap","concurrency":3},{"name":"big","concurrency":40}]`,
	}
	with := func(kv ...string) map[string]string {
		m := maps(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	t.Run("defaults", func(t *testing.T) {
		cfg, err := ecsexecutor.Load(nil, getenv(base), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Lambda.Name != "nap" || cfg.Lambda.Concurrency != 3 || cfg.Prefetch != 3 || cfg.Drain != ecsexecutor.DefaultDrain || cfg.Handler == nil {
			t.Fatalf("got lambda %+v, prefetch %d, drain %s", cfg.Lambda, cfg.Prefetch, cfg.Drain)
		}
	})
	t.Run("handler without AWS credentials", func(t *testing.T) {
		cfg, err := ecsexecutor.Load(nil, getenv(base), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := cfg.Handler.(worker.Program); !ok || !p.WithoutAWSCredentials {
			t.Fatalf("the handler is %#v; want a worker.Program without AWS credentials", cfg.Handler)
		}
	})
	t.Run("environment", func(t *testing.T) {
		cfg, err := ecsexecutor.Load(nil, getenv(with(ecsexecutor.EnvConcurrency, "7", ecsexecutor.EnvPrefetch, "0", ecsexecutor.EnvDrain, "90s")), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Lambda.Concurrency != 7 || cfg.Prefetch != 0 || cfg.Drain != 90*time.Second {
			t.Fatalf("got concurrency %d, prefetch %d, drain %s", cfg.Lambda.Concurrency, cfg.Prefetch, cfg.Drain)
		}
	})
	t.Run("flags over environment", func(t *testing.T) {
		cfg, err := ecsexecutor.Load([]string{"-concurrency", "2", "-drain", "5s"}, getenv(with(ecsexecutor.EnvConcurrency, "7", ecsexecutor.EnvDrain, "90s")), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Lambda.Concurrency != 2 || cfg.Prefetch != 2 || cfg.Drain != 5*time.Second {
			t.Fatalf("got concurrency %d, prefetch %d, drain %s", cfg.Lambda.Concurrency, cfg.Prefetch, cfg.Drain)
		}
	})
	t.Run("prefetch at most one receive", func(t *testing.T) {
		cfg, err := ecsexecutor.Load(nil, getenv(with(awsfn.EnvLambda, "big", ecsexecutor.EnvHandlers, handlersDir(t, map[string]string{"big": "cat"}))), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Lambda.Concurrency != 40 || cfg.Prefetch != 10 {
			t.Fatalf("got concurrency %d, prefetch %d", cfg.Lambda.Concurrency, cfg.Prefetch)
		}
	})
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // in the error
	}{
		{"no lambda", with(awsfn.EnvLambda, ""), nil, awsfn.EnvLambda + " is not set"},
		{"unknown lambda", with(awsfn.EnvLambda, "nope"), nil, "not in " + awsfn.EnvLambdas},
		{"no table", with(awsfn.EnvTable, ""), nil, awsfn.EnvTable},
		{"no handler", with(awsfn.EnvLambda, "big"), nil, "no handler for lambda big"},
		{"no handlers folder", with(ecsexecutor.EnvHandlers, filepath.Join(dir, "missing")), nil, "handlers folder"},
		{"bad drain", with(ecsexecutor.EnvDrain, "soon"), nil, ecsexecutor.EnvDrain},
		{"zero drain", with(ecsexecutor.EnvDrain, "0s"), nil, "drain must be positive"},
		{"bad concurrency", with(ecsexecutor.EnvConcurrency, "many"), nil, ecsexecutor.EnvConcurrency},
		{"negative prefetch", nil, []string{"-prefetch", "-2"}, "prefetch must be at least 0"},
		{"arguments", nil, []string{"extra"}, "no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if env == nil {
				env = base
			}
			_, err := ecsexecutor.Load(tc.args, getenv(env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}

func maps(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
