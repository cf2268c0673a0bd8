package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/cmd/dlock/internal/etcdsrv"
)

// TestRunEtcd: dlock run --etcd on a real 3-member cluster: runs serialize
// with fences that grow, -n/-w/-E/-q behave as with Redis, a revoked lease
// ends the command with 76, the token commands work, one member down of
// three changes nothing, and an unreachable cluster exits 69.
func TestRunEtcd(t *testing.T) {
	t.Parallel()
	c, cli := startEtcd(t, 3)
	var flags []string
	for _, ep := range c.Endpoints() {
		flags = append(flags, "--etcd", ep)
	}
	env := binEnv()
	ctx := context.Background()

	t.Run("serial", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "log")
		var procs []*proc
		for range 3 {
			procs = append(procs, startBin(t, env, runArgs(append([]string{"--wait", "30s", "--ttl", "2s"}, flags...), "e:serial", "record", log, "200ms")...))
		}
		for i, p := range procs {
			if r := p.wait(t); r.code != 0 {
				t.Fatalf("run #%d: exit %d; stderr: %s", i, r.code, r.stderr)
			}
		}
		lines := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
		if len(lines) != 6 {
			t.Fatalf("want 3 enter/exit pairs:\n%s", strings.Join(lines, "\n"))
		}
		var last uint64
		for i := 0; i < 6; i += 2 {
			if !strings.HasPrefix(lines[i], "enter") || !strings.HasPrefix(lines[i+1], "exit") {
				t.Fatalf("the commands overlapped:\n%s", strings.Join(lines, "\n"))
			}
			f, _ := strconv.ParseUint(strings.Fields(lines[i])[2], 10, 64)
			if f <= last {
				t.Errorf("fence %d after %d: want growing", f, last)
			}
			last = f
		}
	})

	t.Run("busy", func(t *testing.T) {
		// The cluster from the environment, comma-separated.
		env := binEnv("DLOCK_ETCD=" + strings.Join(c.Endpoints(), ","))
		ready := filepath.Join(t.TempDir(), "ready")
		h := startBin(t, env, runArgs([]string{"--ttl", "3s"}, "e:busy", "hold", ready, "60s")...)
		waitFile(t, ready, h)
		// run publishes its holder record as the key's value.
		var listed struct{ Locks []dlock.LockInfo }
		if r := runBin(t, env, "inspect", "e:busy*", "--json"); json.Unmarshal([]byte(r.stdout), &listed) != nil ||
			len(listed.Locks) != 1 || listed.Locks[0].PID != h.cmd.Process.Pid {
			t.Errorf("inspect of a dlock run's lock: %s (stderr %s), want its holder, pid %d", r.stdout, r.stderr, h.cmd.Process.Pid)
		}
		leases := func() int {
			resp, err := cli.Leases(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return len(resp.Leases)
		}
		before := leases()
		if r := runBin(t, env, runArgs(nil, "e:busy", "exit", "0")...); r.code != exitBusy {
			t.Errorf("-w 0 on a held lock: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
		}
		if r := runBin(t, env, runArgs([]string{"-n", "-q", "-E", "0"}, "e:busy", "exit", "3")...); r.code != 0 || r.stderr != "" {
			t.Errorf("-n -q -E 0 on a held lock: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
		}
		if after := leases(); after != before {
			t.Errorf("after two tries on a held lock: %d leases, want the %d of before", after, before)
		}
		r := runBin(t, env, runArgs([]string{"-w", "1s"}, "e:busy", "exit", "0")...)
		if r.code != exitBusy || r.elapsed < time.Second {
			t.Errorf("-w 1s on a held lock: exit %d after %v, want %d after 1s; stderr: %s", r.code, r.elapsed, exitBusy, r.stderr)
		}
		// A run that gave up leaves nothing behind: its lease, and its key
		// in the queue with it, would hold the lock from the next waiter
		// for a TTL after the holder is gone.
		if after := leases(); after != before {
			t.Errorf("after dlock run -w 1s gave up: %d leases, want the %d of before", after, before)
		}
		if r := runInProcess(t, []string{"DLOCK_ETCD=" + strings.Join(c.Endpoints(), ",")}, "acquire", "-w", "0.5", "e:busy"); r.code != exitBusy {
			t.Errorf("acquire -w 0.5 on a held lock: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
		}
		if after := leases(); after != before {
			t.Errorf("after dlock acquire -w 0.5 gave up: %d leases, want the %d of before", after, before)
		}

		// The holder's lease revoked by another client: the lock is lost,
		// the command is terminated, dlock exits 76.
		resp, err := cli.Get(ctx, "e:busy/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("the holder's key: %v, %d keys", err, len(resp.Kvs))
		}
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
		if r := h.wait(t); r.code != exitLost || !strings.Contains(r.stderr, "lost") {
			t.Errorf("holder after its lease was revoked: exit %d, want %d; stderr: %s", r.code, exitLost, r.stderr)
		}
		if r := runBin(t, env, runArgs([]string{"-w", "10s"}, "e:busy", "exit", "0")...); r.code != 0 {
			t.Errorf("after the loss: exit %d, want 0; stderr: %s", r.code, r.stderr)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		renv := []string{"DLOCK_ETCD=" + strings.Join(c.Endpoints(), ",")}
		r := runInProcess(t, renv, "acquire", "e:tokens", "--ttl", "20s")
		if r.code != 0 {
			t.Fatalf("acquire: exit %d; stderr: %s", r.code, r.stderr)
		}
		vars := parseVars(t, r.stdout)
		if r := runInProcess(t, renv, "acquire", "e:tokens"); r.code != exitBusy {
			t.Errorf("second acquire: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
		}
		if r := runInProcess(t, renv, "extend", "e:tokens", vars["DLOCK_TOKEN"], "--ttl", "20s"); r.code != 0 {
			t.Errorf("extend: exit %d; stderr: %s", r.code, r.stderr)
		}
		if r := runInProcess(t, renv, "release", "e:tokens", vars["DLOCK_TOKEN"]); r.code != 0 {
			t.Errorf("release: exit %d; stderr: %s", r.code, r.stderr)
		}
		if r := runInProcess(t, renv, "release", "e:tokens", vars["DLOCK_TOKEN"]); r.code != exitLost {
			t.Errorf("second release: exit %d, want %d", r.code, exitLost)
		}
		if r := runInProcess(t, renv, "extend", "e:tokens", vars["DLOCK_TOKEN"]); r.code != exitLost {
			t.Errorf("extend after release: exit %d, want %d", r.code, exitLost)
		}
		if r := runInProcess(t, append(renv, "DLOCK_REDIS=redis://127.0.0.1:1"), "acquire", "e:tokens"); r.code != exitUsage {
			t.Errorf("DLOCK_ETCD and DLOCK_REDIS: exit %d, want %d", r.code, exitUsage)
		}
	})

	// extend -t beyond acquire's --ttl: the lock is kept for the new TTL,
	// not for the lease it was taken with.
	t.Run("extend beyond the lease", func(t *testing.T) {
		renv := []string{"DLOCK_ETCD=" + strings.Join(c.Endpoints(), ",")}
		r := runInProcess(t, renv, "acquire", "e:longer", "--ttl", "1s")
		if r.code != 0 {
			t.Fatalf("acquire: exit %d; stderr: %s", r.code, r.stderr)
		}
		tok := parseVars(t, r.stdout)["DLOCK_TOKEN"]
		if r := runInProcess(t, renv, "extend", "e:longer", tok, "--ttl", "8s"); r.code != 0 {
			t.Fatalf("extend -t 8s: exit %d; stderr: %s", r.code, r.stderr)
		}
		time.Sleep(3 * time.Second) // three times the first lease
		if r := runInProcess(t, renv, "acquire", "e:longer", "-n"); r.code != exitBusy {
			t.Errorf("acquire -n 3s after extend -t 8s of a 1s lock: exit %d, want %d; stderr: %s", r.code, exitBusy, r.stderr)
		}
		if r := runInProcess(t, renv, "release", "e:longer", tok); r.code != 0 {
			t.Errorf("release: exit %d; stderr: %s", r.code, r.stderr)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		renv := []string{"DLOCK_ETCD=" + strings.Join(c.Endpoints(), ",")}
		r := runInProcess(t, renv, "acquire", "e:insp", "--ttl", "20s")
		if r.code != 0 {
			t.Fatalf("acquire: exit %d; stderr: %s", r.code, r.stderr)
		}
		vars := parseVars(t, r.stdout)
		defer runInProcess(t, renv, "release", "e:insp", vars["DLOCK_TOKEN"])
		r = runInProcess(t, renv, "inspect", "e:ins*", "--json", "--show-token")
		if r.code != 0 {
			t.Fatalf("inspect --json: exit %d; stderr: %s", r.code, r.stderr)
		}
		var out struct{ Locks []dlock.LockInfo }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("inspect --json: %v: %s", err, r.stdout)
		}
		if len(out.Locks) != 1 {
			t.Fatalf("inspect --json: %d locks, want e:insp alone: %s", len(out.Locks), r.stdout)
		}
		got := out.Locks[0]
		if got.Key != "e:insp" || got.Token != vars["DLOCK_TOKEN"] ||
			strconv.FormatUint(got.Fence, 10) != vars["DLOCK_FENCE"] || got.TTL <= 0 || got.Waiting != 0 || !got.Majority {
			t.Fatalf("inspect --json: %+v, want e:insp with token %s, fence %s", got, vars["DLOCK_TOKEN"], vars["DLOCK_FENCE"])
		}
		r = runInProcess(t, renv, "inspect", "e:ins*")
		if r.code != 0 || !strings.Contains(r.stdout, "e:insp") || !strings.Contains(r.stdout, vars["DLOCK_FENCE"]) {
			t.Fatalf("inspect: exit %d, stdout %q, stderr %s; want a row for e:insp with its fence", r.code, r.stdout, r.stderr)
		}
		if r := runInProcess(t, renv, "inspect", "e:none*"); r.code != 0 || !strings.Contains(r.stdout, "no held locks") {
			t.Errorf("inspect of nothing: exit %d, stdout %q", r.code, r.stdout)
		}
		if r := runInProcess(t, renv, "inspect", "e:[", "--json"); r.code != exitUsage {
			t.Errorf("inspect with a bad pattern: exit %d, want %d", r.code, exitUsage)
		}
	})

	// Last: these stop members.
	t.Run("minority down", func(t *testing.T) {
		c.Members[0].Kill()
		log := filepath.Join(t.TempDir(), "log")
		if r := runBin(t, env, runArgs(append([]string{"-w", "20s"}, flags...), "e:minority", "record", log, "10ms")...); r.code != 0 {
			t.Errorf("with 1 of 3 members down: exit %d, want 0; stderr: %s", r.code, r.stderr)
		}
		c.Members[1].Kill()
		r := runBin(t, env, runArgs(flags, "e:minority", "exit", "0")...)
		if r.code != exitUnavailable {
			t.Errorf("with 2 of 3 members down: exit %d, want %d; stderr: %s", r.code, exitUnavailable, r.stderr)
		}
		oneLine(t, r.stderr)
	})

	t.Run("unreachable", func(t *testing.T) {
		r := runBin(t, env, runArgs([]string{"--etcd", fmt.Sprintf("http://dlock:s3cr3t-pw@%s", c.Members[0].ClientAddr)}, "e:gone", "exit", "0")...)
		if r.code != exitUnavailable {
			t.Errorf("dead cluster: exit %d, want %d; stderr: %s", r.code, exitUnavailable, r.stderr)
		}
		if strings.Contains(r.stderr, "s3cr3t-pw") {
			t.Errorf("the password was printed: %s", r.stderr)
		}
		oneLine(t, r.stderr)
	})
}

// startEtcd starts an etcd cluster of n members for the test, and returns
// it with a client; both end with the test.
func startEtcd(t *testing.T, n int) (*etcdsrv.Cluster, *clientv3.Client) {
	t.Helper()
	if !etcdsrv.Installed() {
		t.Fatal(etcdsrv.ErrNoEtcd) // make test installs it
	}
	c, err := etcdsrv.Start(context.Background(), t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return c, cli
}

// TestEtcdMisconfigured: a cluster with auth on refuses a client without a
// user, and a wrong password: dlock exits 78 at once, with the cluster's
// reason, before --wait runs out.
func TestEtcdMisconfigured(t *testing.T) {
	t.Parallel()
	c, admin := startEtcd(t, 1)
	ctx := context.Background()
	for _, step := range []func() error{ // etcdctl role add root, user add root, ..., auth enable
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	ep := c.Endpoints()[0]
	for url, reason := range map[string]string{
		ep: "user name is empty",
		strings.Replace(ep, "://", "://root:wrong@", 1): "authentication failed",
	} {
		r := runInProcess(t, nil, "run", "--etcd", url, "-w", "2s", "k", "--", "true")
		if r.code != exitMisconfigured || r.elapsed >= 2*time.Second || !strings.Contains(r.stderr, reason) {
			t.Errorf("run -w 2s (%s): exit %d after %v, want %d at once; stderr: %s", reason, r.code, r.elapsed, exitMisconfigured, r.stderr)
		}
		oneLine(t, r.stderr)
	}
}
