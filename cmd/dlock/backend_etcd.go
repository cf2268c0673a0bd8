package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
)

// etcdAttempt bounds one request to an etcd cluster that gives no answer:
// etcd's client waits for a connection as long as its context lets it, so
// without this an unreachable cluster would block `run -n` forever. It
// plays the part of a Redis URL's dial_timeout.
const etcdAttempt = 5 * time.Second

func addEtcdFlag(cmd *cobra.Command, f *backendFlags) {
	cmd.Flags().StringArrayVar(&f.etcd, "etcd", nil,
		"etcd member `URL` (http://host:2379, https:// for TLS, user:password@ for auth);\nrepeat it for each member of the cluster (default: $DLOCK_ETCD, comma-separated)")
}

// etcdSpec returns the etcd endpoints to use, if any: the flags if any
// backend flag was given, the environment otherwise. Giving etcd together
// with another backend is a usage error.
func (a *app) etcdSpec(cmd *cobra.Command, f *backendFlags) ([]string, error) {
	fl := cmd.Flags()
	var eps []string
	other := false
	if fl.Changed("redis") || fl.Changed("postgres") || fl.Changed("etcd") {
		eps = f.etcd
		other = len(f.redis) > 0 || f.postgres != ""
		for _, e := range eps {
			if strings.TrimSpace(e) == "" {
				return nil, usagef("--etcd: empty URL")
			}
		}
	} else {
		eps = strings.Split(a.lookupEnv("DLOCK_ETCD"), ",")
		other = strings.TrimSpace(a.lookupEnv("DLOCK_REDIS")) != "" || strings.TrimSpace(a.lookupEnv("DLOCK_POSTGRES")) != ""
	}
	var out []string
	for _, e := range eps {
		if e = strings.TrimSpace(e); e != "" {
			a.redact.addURL(e)
			out = append(out, e)
		}
	}
	if len(out) > 0 && other {
		return nil, usagef("%s", chooseOne)
	}
	return out, nil
}

// openEtcd builds an etcd backend on the cluster whose members are urls.
// Like the others it sends nothing until the first operation; with
// holder, run's locks carry the holder record (etcdlock.WithHolderInfo). Every use
// works on etcd: run, the token commands and inspect.
func (a *app) openEtcd(urls []string, f *backendFlags) (*backend, error) {
	cfg := clientv3.Config{Logger: zap.NewNop(), DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second}
	var nodes []string
	for i, raw := range urls {
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw
		}
		p, err := url.Parse(raw)
		if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https") || (p.Path != "" && p.Path != "/") {
			return nil, usagef("etcd URL #%d: want http://host:port or https://host:port", i+1)
		}
		if p.User != nil {
			pass, _ := p.User.Password()
			if cfg.Username != "" && (cfg.Username != p.User.Username() || cfg.Password != pass) {
				return nil, usagef("etcd URL #%d: its user differs from URL #1's: one client has one user", i+1)
			}
			cfg.Username, cfg.Password = p.User.Username(), pass
		}
		if p.Scheme == "https" && cfg.TLS == nil {
			cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		cfg.Endpoints = append(cfg.Endpoints, p.Scheme+"://"+p.Host)
		nodes = append(nodes, p.Host)
	}
	if cfg.Username != "" {
		// The client authenticates in New, and without a dial timeout it
		// would wait for an unreachable cluster forever.
		cfg.DialTimeout = etcdAttempt
	}
	cli, err := clientv3.New(cfg)
	switch {
	case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthFailed): // a wrong user or password
		return nil, exitf(exitMisconfigured, "backend refused (fix its setup): etcd %s: %v", strings.Join(nodes, ","), err)
	case err != nil:
		return nil, exitf(exitUnavailable, "backend unreachable: etcd %s: %v", strings.Join(nodes, ","), err)
	}
	opts := []etcdlock.Option{etcdlock.WithLogger(a.logger()), etcdlock.WithObserver(a.observe)}
	if f.holder {
		opts = append(opts, etcdlock.WithHolderInfo(f.name))
	}
	l, err := etcdlock.New(cli, opts...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	el := &etcdLocker{Locker: l}
	return &backend{kind: "etcd", locker: el, tokens: el, nodes: nodes, leave: func() { l.Close() }, closers: []func(){func() { cli.Close() }}}, nil
}

// etcdLocker bounds each request by etcdAttempt, and says that a cluster
// that did not answer in time is unavailable (not busy).
type etcdLocker struct{ *etcdlock.Locker }

func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < etcdAttempt {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, etcdAttempt, errNoAnswer)
}

var errNoAnswer = fmt.Errorf("%w: no answer from etcd within %v", dlock.ErrUnavailable, etcdAttempt)

// noAnswer turns an error caused by etcdAttempt running out into errNoAnswer
// with the cluster's error: the caller's own context did not end.
func noAnswer(parent, ctx context.Context, err error) error {
	if err != nil && parent.Err() == nil && errors.Is(context.Cause(ctx), errNoAnswer) {
		var ne *dlock.NodeError
		if errors.As(err, &ne) {
			return fmt.Errorf("%w: %w", errNoAnswer, ne)
		}
		return errNoAnswer
	}
	return err
}

func (e *etcdLocker) TryAcquire(parent context.Context, key string, ttl time.Duration) (*dlock.Lock, error) {
	ctx, cancel := bounded(parent)
	defer cancel()
	lock, err := e.Locker.TryAcquire(ctx, key, ttl)
	return lock, noAnswer(parent, ctx, err)
}

func (e *etcdLocker) ReleaseToken(parent context.Context, key, token string) error {
	ctx, cancel := bounded(parent)
	defer cancel()
	return noAnswer(parent, ctx, e.Locker.ReleaseToken(ctx, key, token))
}

func (e *etcdLocker) ExtendToken(parent context.Context, key, token string, ttl time.Duration) error {
	ctx, cancel := bounded(parent)
	defer cancel()
	return noAnswer(parent, ctx, e.Locker.ExtendToken(ctx, key, token, ttl))
}

// Inspect lists the locks through etcdlock's Inspect, bounded as the other
// requests are.
func (e *etcdLocker) Inspect(parent context.Context, pattern string, limit int) ([]dlock.LockInfo, error) {
	ctx, cancel := bounded(parent)
	defer cancel()
	infos, err := e.Locker.Inspect(ctx, pattern, limit)
	return infos, noAnswer(parent, ctx, err)
}
