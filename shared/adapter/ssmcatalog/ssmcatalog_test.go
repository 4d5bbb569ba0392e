package ssmcatalog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/openatf/atf/shared/adapter/awsfn"
	"github.com/openatf/atf/shared/adapter/ssmcatalog"
	"github.com/openatf/atf/shared/task"
)

// fakeSSM serves parameters a page at a time, in the order it holds them, as GetParametersByPath
// does, and counts its calls.
type fakeSSM struct {
	mu     sync.Mutex
	params []types.Parameter
	err    error         // every call fails with it, if set
	hold   chan struct{} // if set, a call waits for it to close
	calls  int
	paths  []string
	slack  []time.Duration // each call's time to its deadline
}

func (f *fakeSSM) set(params ...string) { // name, value, name, value...
	f.mu.Lock()
	defer f.mu.Unlock()
	f.params = nil
	for i := 0; i < len(params); i += 2 {
		f.params = append(f.params, types.Parameter{Name: aws.String(params[i]), Value: aws.String(params[i+1])})
	}
}

func (f *fakeSSM) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeSSM) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeSSM) GetParametersByPath(ctx context.Context, in *ssm.GetParametersByPathInput, _ ...func(*ssm.Options)) (*ssm.GetParametersByPathOutput, error) {
	f.mu.Lock()
	f.calls++
	f.paths = append(f.paths, aws.ToString(in.Path))
	if d, ok := ctx.Deadline(); ok {
		f.slack = append(f.slack, time.Until(d))
	} else {
		f.slack = append(f.slack, -1)
	}
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	f.mu.Lock()
	err, params := f.err, f.params
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	start := 0
	if in.NextToken != nil {
		start, _ = strconv.Atoi(*in.NextToken)
	}
	end := min(start+int(aws.ToInt32(in.MaxResults)), len(params))
	out := &ssm.GetParametersByPathOutput{Parameters: slices.Clone(params[start:end])}
	if end < len(params) {
		out.NextToken = aws.String(strconv.Itoa(end))
	}
	return out, nil
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type reads struct {
	mu     sync.Mutex
	failed []bool
}

func (r *reads) LambdasRead(failed bool, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, failed)
}

type fixture struct {
	ssm   *fakeSSM
	clock *clock
	cat   *ssmcatalog.Catalog
	log   *bytes.Buffer
	reads *reads
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{ssm: &fakeSSM{}, clock: &clock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}, log: &bytes.Buffer{}, reads: &reads{}}
	var err error
	f.cat, err = ssmcatalog.New(ssmcatalog.Config{
		Client: f.ssm, Path: awsfn.LambdasPath("dev"), Parse: awsfn.ParseLambdas, Now: f.clock.Now,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: f.log}, nil)), Metrics: f.reads,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func names(t *testing.T, c task.Catalog) []string {
	t.Helper()
	ls, err := c.Lambdas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

// TestReadsAtMostOncePerMaxAge: the lambdas are read on first use, served from what was read
// for MaxAge, and read again at MaxAge, so a stack added shows within it.
func TestReadsAtMostOncePerMaxAge(t *testing.T) {
	f := newFixture(t)
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`)
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("lambdas %v, want [echo]", got)
	}
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`, "/atf/dev/lambdas/b", `[{"name":"resize","concurrency":9}]`)
	f.clock.add(ssmcatalog.MaxAge - time.Second)
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo"}) || f.ssm.count() != 1 {
		t.Fatalf("before MaxAge: lambdas %v after %d calls, want [echo] after 1", got, f.ssm.count())
	}
	if _, ok, _ := f.cat.Lambda(t.Context(), "resize"); ok {
		t.Fatal("resize found before MaxAge")
	}
	f.clock.add(time.Second)
	l, ok, err := f.cat.Lambda(t.Context(), "resize")
	if err != nil || !ok || l.Concurrency != 9 || !slices.Equal(l.Priorities, task.DefaultPriorities) {
		t.Fatalf("at MaxAge: resize %+v, %v, %v; want it read, with defaults", l, ok, err)
	}
	if f.ssm.count() != 2 {
		t.Fatalf("%d calls, want 2", f.ssm.count())
	}
	// Every call has a deadline of its own, and asks for the path as SSM names it.
	for i, s := range f.ssm.slack {
		if s <= 0 || s > ssmcatalog.CallTimeout {
			t.Errorf("call %d: %v to its deadline, want within (0, %v]", i, s, ssmcatalog.CallTimeout)
		}
		if f.ssm.paths[i] != "/atf/dev/lambdas" {
			t.Errorf("call %d: path %q, want /atf/dev/lambdas", i, f.ssm.paths[i])
		}
	}
}

// TestReadsEveryPage: every page of parameters is read, 10 at a time.
func TestReadsEveryPage(t *testing.T) {
	f := newFixture(t)
	var params, want []string
	for i := range 25 {
		name := fmt.Sprintf("l%02d", i)
		params = append(params, fmt.Sprintf("/atf/dev/lambdas/s%02d", i), `[{"name":"`+name+`"}]`)
		want = append(want, name)
	}
	f.ssm.set(params...)
	if got := names(t, f.cat); !slices.Equal(got, want) {
		t.Fatalf("lambdas %v, want %v", got, want)
	}
	if f.ssm.count() != 3 {
		t.Fatalf("%d calls, want 3 pages", f.ssm.count())
	}
}

// TestServesStaleWhileReadsFail: a read that fails leaves the last lambdas served, logged and
// counted; the next read waits RetryDelay; past StaleLimit the catalog is unavailable.
func TestServesStaleWhileReadsFail(t *testing.T) {
	f := newFixture(t)
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`)
	names(t, f.cat)
	f.ssm.fail(errors.New("ThrottlingException: Rate exceeded"))
	f.clock.add(ssmcatalog.MaxAge)
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("after a failed read: lambdas %v, want the last read's [echo]", got)
	}
	if f.ssm.count() != 2 || !strings.Contains(f.log.String(), "Rate exceeded") || !slices.Equal(f.reads.failed, []bool{false, true}) {
		t.Fatalf("%d calls, reads failed %v, log %q; want 2 calls, the failure logged and counted", f.ssm.count(), f.reads.failed, f.log)
	}
	f.clock.add(ssmcatalog.RetryDelay - time.Second)
	names(t, f.cat)
	if f.ssm.count() != 2 {
		t.Fatalf("read again %d times within RetryDelay, want none", f.ssm.count()-2)
	}
	f.clock.add(time.Second)
	names(t, f.cat)
	if f.ssm.count() != 3 {
		t.Fatalf("%d calls after RetryDelay, want a third", f.ssm.count())
	}
	f.clock.add(ssmcatalog.StaleLimit - ssmcatalog.MaxAge - ssmcatalog.RetryDelay) // the last read is StaleLimit old
	if _, err := f.cat.Lambdas(t.Context()); !errors.Is(err, task.ErrUnavailable) {
		t.Fatalf("past StaleLimit: %v, want ErrUnavailable", err)
	}
	if _, _, err := f.cat.Lambda(t.Context(), "echo"); !errors.Is(err, task.ErrUnavailable) {
		t.Fatalf("past StaleLimit, Lambda: %v, want ErrUnavailable", err)
	}
	f.ssm.fail(nil)
	f.clock.add(ssmcatalog.RetryDelay)
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("once SSM answers: lambdas %v, want [echo]", got)
	}
}

// TestUnavailableBeforeFirstRead: with nothing read yet, a failed read makes the catalog
// unavailable, and callers within RetryDelay are answered at once, without a call.
func TestUnavailableBeforeFirstRead(t *testing.T) {
	f := newFixture(t)
	f.ssm.fail(errors.New("dial tcp: connection refused"))
	for range 3 {
		if _, _, err := f.cat.Lambda(t.Context(), "echo"); !errors.Is(err, task.ErrUnavailable) {
			t.Fatalf("Lambda: %v, want ErrUnavailable", err)
		}
	}
	if f.ssm.count() != 1 {
		t.Fatalf("%d calls, want 1: the rest within RetryDelay", f.ssm.count())
	}
}

// TestCallerDoesNotWaitPastItsContext: a caller waits for a read in flight no longer than its
// own context: it gets the last lambdas read, or none yet: unavailable.
func TestCallerDoesNotWaitPastItsContext(t *testing.T) {
	f := newFixture(t)
	f.ssm.hold = make(chan struct{})
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.cat.Lambdas(done); !errors.Is(err, task.ErrUnavailable) {
		t.Fatalf("none read yet: %v, want ErrUnavailable", err)
	}
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`)
	f.ssm.mu.Lock()
	close(f.ssm.hold) // that read now ends, and this caller waits for it
	f.ssm.hold = nil
	f.ssm.mu.Unlock()
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("lambdas %v, want [echo]", got)
	}

	f.ssm.mu.Lock()
	f.ssm.hold = make(chan struct{})
	f.ssm.mu.Unlock()
	defer close(f.ssm.hold)
	f.clock.add(ssmcatalog.MaxAge)
	ls, err := f.cat.Lambdas(done)
	if err != nil || len(ls) != 1 {
		t.Fatalf("a read hangs: %v, %v; want the last read's lambdas", ls, err)
	}
}

// TestLambdaInTwoParameters: a lambda two stacks write is an error, logged; the parameter first
// by name keeps it, whatever order SSM returns them in.
func TestLambdaInTwoParameters(t *testing.T) {
	for _, order := range [][]string{
		{"/atf/dev/lambdas/payments", `[{"name":"refund","concurrency":7},{"name":"charge"}]`, "/atf/dev/lambdas/search", `[{"name":"refund","concurrency":2},{"name":"index"}]`},
		{"/atf/dev/lambdas/search", `[{"name":"refund","concurrency":2},{"name":"index"}]`, "/atf/dev/lambdas/payments", `[{"name":"refund","concurrency":7},{"name":"charge"}]`},
	} {
		f := newFixture(t)
		f.ssm.set(order...)
		if got := names(t, f.cat); !slices.Equal(got, []string{"charge", "index", "refund"}) {
			t.Fatalf("lambdas %v, want [charge index refund]", got)
		}
		l, _, _ := f.cat.Lambda(t.Context(), "refund")
		if l.Concurrency != 7 {
			t.Errorf("returned in order %s, %s: refund has concurrency %d, want 7 (of /atf/dev/lambdas/payments)", order[0], order[2], l.Concurrency)
		}
		if log := f.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "kept=/atf/dev/lambdas/payments ignored=/atf/dev/lambdas/search") {
			t.Errorf("log %q, want an error naming both parameters", log)
		}
	}
}

// TestParameterThatDoesNotParse: a parameter that is no array of valid lambdas is left out,
// logged; the other stacks' lambdas are served.
func TestParameterThatDoesNotParse(t *testing.T) {
	f := newFixture(t)
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`, "/atf/dev/lambdas/b", `{"name":"nope"}`, "/atf/dev/lambdas/c", `[{"name":"bad","concurrency":-1}]`)
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("lambdas %v, want [echo]", got)
	}
	if log := f.log.String(); !strings.Contains(log, "parameter=/atf/dev/lambdas/b") || !strings.Contains(log, "parameter=/atf/dev/lambdas/c") {
		t.Errorf("log %q, want both bad parameters named", log)
	}
}

// TestParameterThatStopsParsing: a stack's parameter that was read, then holds a value this
// process cannot parse (a bad write, a newer atf's spec), is a read that failed for that
// parameter, not a stack deleted: its lambdas stay served as last read. Only a parameter that is
// gone takes its lambdas with it.
func TestParameterThatStopsParsing(t *testing.T) {
	f := newFixture(t)
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`, "/atf/dev/lambdas/b", `[{"name":"resize","concurrency":9}]`)
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo", "resize"}) {
		t.Fatalf("lambdas %v, want [echo resize]", got)
	}
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`, "/atf/dev/lambdas/b", `[{"name":"resize","concurrency":-1}]`)
	f.clock.add(ssmcatalog.MaxAge)
	l, ok, err := f.cat.Lambda(t.Context(), "resize")
	if err != nil || !ok || l.Concurrency != 9 {
		t.Fatalf("b does not parse: resize %+v, %v, %v; want it as last read, concurrency 9", l, ok, err)
	}
	if log := f.log.String(); !strings.Contains(log, "parameter=/atf/dev/lambdas/b") {
		t.Errorf("log %q, want the bad parameter named", log)
	}
	f.ssm.set("/atf/dev/lambdas/a", `[{"name":"echo"}]`)
	f.clock.add(ssmcatalog.MaxAge)
	if got := names(t, f.cat); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("b deleted: lambdas %v, want [echo]", got)
	}
}
