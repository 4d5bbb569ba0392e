// Package ssmcatalog is the task.Catalog of the functions that serve every lambda on AWS (the API
// and the consumer): the lambdas that the lambda stacks write to SSM Parameter Store, one String
// parameter per stack under one path (awsfn.LambdasPath), each holding a JSON array of that
// stack's lambdas. A stack deployed or deleted changes the set within MaxAge, with no redeploy of
// the functions, and the set has no size ceiling (a parameter holds up to 4 KB; a path, any
// number of them).
//
// It reads every parameter under the path (GetParametersByPath, a page of 10 at a time, each call
// within CallTimeout, the whole read within ReadTimeout) and serves what it read for MaxAge. The
// first caller past that reads again; callers meanwhile wait for that read, at most ReadTimeout.
// When a read fails (SSM throttled, unreachable or slow), it keeps serving the last lambdas it
// read, logs and counts the failure, and reads again no sooner than RetryDelay later, so the
// callers meanwhile wait on no read (those that come while the next one runs wait for it); past
// StaleLimit, or with nothing read yet, it answers task.ErrUnavailable. infra/README.md ("The
// lambdas at run time") and docs/guarantees.md say what that means for the API and the consumer.
package ssmcatalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/openatf/atf/shared/task"
)

// Timing of a Catalog.
const (
	// MaxAge is how long what a read returned is served before the next caller reads again.
	MaxAge = 60 * time.Second
	// CallTimeout bounds one GetParametersByPath call, the SDK's retries of it included.
	CallTimeout = 2 * time.Second
	// ReadTimeout bounds a whole read, every page: the longest a caller waits on SSM. It is half
	// the API's store budget (httpapi.DefaultStoreBudget), so that a request that waited on a
	// read still has the other half for the store.
	ReadTimeout = 5 * time.Second
	// RetryDelay is the least time between a failed read and the next one: meanwhile callers get
	// the last lambdas read at once, rather than each waiting on a failing SSM.
	RetryDelay = 5 * time.Second
	// StaleLimit is the oldest read served while reads fail. Past it the catalog answers
	// task.ErrUnavailable: the API refuses requests 503, rather than decide on lambdas that may
	// have changed long ago.
	StaleLimit = 15 * time.Minute
)

// pageSize is the most parameters GetParametersByPath returns a call.
const pageSize = 10

// Client is the part of the SSM client a Catalog calls (*ssm.Client is one).
type Client interface {
	GetParametersByPath(ctx context.Context, in *ssm.GetParametersByPathInput, opts ...func(*ssm.Options)) (*ssm.GetParametersByPathOutput, error)
}

// Metrics observes the reads of a Catalog (emf.Recorder is one).
type Metrics interface {
	// LambdasRead observes one read: whether it failed, and the age of the lambdas the catalog
	// serves after it (zero after a read that succeeded).
	LambdasRead(failed bool, age time.Duration)
}

// Config configures a Catalog.
type Config struct {
	Client Client
	// Path is where the stacks write their parameters, such as /atf/dev/lambdas/.
	Path string
	// Parse reads the value of one parameter: a JSON array of lambdas, with defaults, validated
	// (awsfn.ParseLambdas).
	Parse func(value string) ([]task.Lambda, error)
	// Now is time.Now if nil; tests set a clock of their own.
	Now func() time.Time
	// Logger is slog.Default() if nil.
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics Metrics
}

// Catalog serves the lambdas under one path. It is safe for concurrent use.
type Catalog struct {
	cfg  Config
	path string

	mu      sync.Mutex
	last    *snapshot     // the last read that succeeded; nil before the first
	reading chan struct{} // closed when the read in flight ends; nil if none is
	retryAt time.Time     // after a failed read, none starts before this
	err     error         // of the last read, nil if it succeeded
}

// snapshot is what one read returned.
type snapshot struct {
	byName  map[string]task.Lambda
	sorted  []task.Lambda
	at      time.Time                // when the read began: no parameter is older than what it saw then
	byParam map[string][]task.Lambda // each parameter's lambdas, as last parsed
}

var _ task.Catalog = (*Catalog)(nil)

// New returns a Catalog; it reads nothing before it is first asked.
func New(c Config) (*Catalog, error) {
	if c.Client == nil || c.Parse == nil {
		return nil, errors.New("ssmcatalog: Client and Parse are required")
	}
	if !strings.HasPrefix(c.Path, "/") {
		return nil, fmt.Errorf("ssmcatalog: path %q does not start with /", c.Path)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// SSM names a path without its trailing slash (and IAM grants GetParametersByPath on that).
	return &Catalog{cfg: c, path: cmp.Or(strings.TrimSuffix(c.Path, "/"), "/")}, nil
}

// Lambda implements task.Catalog.
func (c *Catalog) Lambda(ctx context.Context, name string) (task.Lambda, bool, error) {
	s, err := c.current(ctx)
	if err != nil {
		return task.Lambda{}, false, err
	}
	l, ok := s.byName[name]
	return l, ok, nil
}

// Lambdas implements task.Catalog.
func (c *Catalog) Lambdas(ctx context.Context) ([]task.Lambda, error) {
	s, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	return slices.Clone(s.sorted), nil
}

// current returns the lambdas to serve: the last read's if it is younger than MaxAge, else those
// of a new read, waited for until it ends or ctx does; or, when that read fails or the caller
// cannot wait, the last read's still, if younger than StaleLimit.
func (c *Catalog) current(ctx context.Context) (*snapshot, error) {
	c.mu.Lock()
	if c.last != nil && c.cfg.Now().Sub(c.last.at) < MaxAge {
		defer c.mu.Unlock()
		return c.last, nil
	}
	if c.reading == nil && !c.cfg.Now().Before(c.retryAt) {
		c.reading = make(chan struct{})
		// The read outlives this caller's context: others may wait for it.
		go c.read(context.WithoutCancel(ctx), c.reading)
	}
	reading := c.reading
	c.mu.Unlock()
	if reading != nil {
		select {
		case <-reading:
		case <-ctx.Done():
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.cfg.Now().Sub(c.last.at) < StaleLimit {
		return c.last, nil
	}
	switch {
	case c.err != nil:
		return nil, task.Errorf(task.ErrUnavailable, "the lambdas are unknown: reading SSM parameters under %s: %v", c.path, c.err)
	case ctx.Err() != nil:
		return nil, task.Errorf(task.ErrUnavailable, "the lambdas are unknown: reading SSM parameters under %s: %v", c.path, ctx.Err())
	}
	return nil, task.Errorf(task.ErrUnavailable, "the lambdas are unknown: no read of SSM parameters under %s yet", c.path)
}

// read reads every parameter, within ReadTimeout whoever waits for it, keeps what it read, and
// closes done.
func (c *Catalog) read(ctx context.Context, done chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	began := c.cfg.Now()
	params, err := c.parameters(ctx)
	var s *snapshot
	if err == nil {
		c.mu.Lock()
		last := c.last // only reads write it, and one runs at a time
		c.mu.Unlock()
		s = c.merge(params, last, began)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	if err == nil {
		c.last, c.retryAt = s, time.Time{}
	} else {
		c.retryAt = c.cfg.Now().Add(RetryDelay)
	}
	c.reading = nil
	close(done)
	var age time.Duration
	if err != nil {
		age = -1 // none yet
		if c.last != nil {
			age = c.cfg.Now().Sub(c.last.at)
		}
		c.cfg.Logger.Error("reading the lambdas from SSM failed: serving the last read", "path", c.path, "age", age, "err", err)
	}
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.LambdasRead(err != nil, max(age, 0))
	}
}

// parameters returns every parameter directly under the path, each page read within CallTimeout.
func (c *Catalog) parameters(ctx context.Context) ([]types.Parameter, error) {
	var params []types.Parameter
	in := &ssm.GetParametersByPathInput{Path: aws.String(c.path), MaxResults: aws.Int32(pageSize)}
	for {
		call, cancel := context.WithTimeout(ctx, CallTimeout)
		out, err := c.cfg.Client.GetParametersByPath(call, in)
		cancel()
		if err != nil {
			return nil, err
		}
		params = append(params, out.Parameters...)
		if aws.ToString(out.NextToken) == "" {
			return params, nil
		}
		in.NextToken = out.NextToken
	}
}

// merge makes one set of the parameters' lambdas. A parameter that does not parse is logged and
// keeps the lambdas it held in the last read, if any: its stack is still there, and a bad value
// is no removal; the other stacks' lambdas are served either way. A lambda in two parameters is
// an error of the stacks, logged each read; the parameter first by name keeps it, whatever order
// SSM returns them in and whenever each was written, so every process decides alike (unless that
// parameter stops parsing: a process that read it valid keeps it, one that never did does not).
func (c *Catalog) merge(params []types.Parameter, last *snapshot, at time.Time) *snapshot {
	slices.SortFunc(params, func(a, b types.Parameter) int { return cmp.Compare(aws.ToString(a.Name), aws.ToString(b.Name)) })
	s := &snapshot{byName: map[string]task.Lambda{}, at: at, byParam: map[string][]task.Lambda{}}
	from := map[string]string{} // the parameter each lambda comes from
	for _, p := range params {
		name := aws.ToString(p.Name)
		ls, err := c.cfg.Parse(aws.ToString(p.Value))
		if err != nil {
			kept, ok := []task.Lambda(nil), false
			if last != nil {
				kept, ok = last.byParam[name]
			}
			c.cfg.Logger.Error("an SSM parameter of lambdas does not parse: its lambdas are those it held last, if any", "parameter", name, "kept", len(kept), "err", err)
			if !ok {
				continue
			}
			ls = kept
		}
		s.byParam[name] = ls
		for _, l := range ls {
			if first, ok := from[l.Name]; ok {
				c.cfg.Logger.Error("a lambda is in two SSM parameters: the first by name keeps it", "lambda", l.Name, "kept", first, "ignored", name)
				continue
			}
			from[l.Name] = name
			s.byName[l.Name] = l
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.byName)) {
		s.sorted = append(s.sorted, s.byName[name])
	}
	return s
}
