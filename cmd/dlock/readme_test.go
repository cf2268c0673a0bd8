package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// readmeBlocks returns the README's first Go block and the shell block of
// its section on the command.
func readmeBlocks(t *testing.T) (program, shell string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	find := func(after, lang string) string {
		i := strings.Index(readme, after)
		if i < 0 {
			t.Fatalf("README: no %q", after)
		}
		rest := readme[i:]
		start := strings.Index(rest, "```"+lang+"\n")
		if start < 0 {
			t.Fatalf("README: no %s block after %q", lang, after)
		}
		rest = rest[start+len(lang)+4:]
		return rest[:strings.Index(rest, "```")]
	}
	return find("## Use it", "go"), find("## The `dlock` command", "sh")
}

// The README's program compiles in a module of its own that takes the
// library by a replace, as a user's would by go get, and takes the lock on
// a real server; its build list holds only go-redis, pgx, what they
// require, and goleak (the library's tests' one dependency). Then the
// README's command lines run against the same server.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program outside the repository")
	}
	program, shell := readmeBlocks(t)
	srv := testsrv.StartRedis(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main.go", program)
	write("go.mod", "module example.com/readme\n\ngo 1.25.0\n\n"+
		"require github.com/dlock-go/dlock v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/dlock-go/dlock => "+root+"\n")
	gocmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	gocmd("mod", "tidy")
	gocmd("build", "-o", "readme", ".")
	run := exec.Command(filepath.Join(dir, "readme"))
	run.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr)
	out, err := run.CombinedOutput()
	if err != nil || !regexp.MustCompile(`billing invoice 4821 with fence \d+`).Match(out) {
		t.Fatalf("README program: %v\n%s", err, out)
	}

	// The build list: every module is the program, the library, goleak,
	// go-redis, pgx, or something their go.mod files require.
	type module struct{ Path, GoMod string }
	mods := map[string]module{}
	dec := json.NewDecoder(strings.NewReader(gocmd("list", "-m", "-json", "all")))
	for {
		var m module
		if err := dec.Decode(&m); err != nil {
			break
		}
		mods[m.Path] = m
	}
	allowed := map[string]bool{"example.com/readme": true, "github.com/dlock-go/dlock": true, "go.uber.org/goleak": true}
	requirement := regexp.MustCompile(`(?m)^(?:require\s+|\t)(\S+) v\S+`)
	queue := []string{"github.com/redis/go-redis/v9", "github.com/jackc/pgx/v5"}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if allowed[m] {
			continue
		}
		allowed[m] = true
		if gomod, err := os.ReadFile(mods[m].GoMod); err == nil {
			for _, r := range requirement.FindAllStringSubmatch(string(gomod), -1) {
				queue = append(queue, r[1])
			}
		}
	}
	var others []string
	for m := range mods {
		if !allowed[m] {
			others = append(others, m)
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		t.Errorf("the build list of a program that imports redislock holds %v", others)
	}
	t.Logf("build list: %d modules; module graph: %d modules", len(mods), graphModules(gocmd("mod", "graph")))

	// The command lines, but the install, with the harness server.
	var lines []string
	for _, line := range strings.Split(shell, "\n") {
		if !strings.HasPrefix(line, "go install ") {
			lines = append(lines, strings.ReplaceAll(line, "localhost:6379", srv.Addr))
		}
	}
	sh := exec.Command("/bin/sh", "-e", "-c", strings.Join(lines, "\n"))
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(dlockBin)+":"+os.Getenv("PATH"))
	out, err = sh.CombinedOutput()
	if err != nil {
		t.Fatalf("README's command lines: %v\n%s", err, out)
	}
	for _, want := range []string{"the report runs here", "posting with fence ", "leading in term ", "nobody leads (exit 3)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("README's command lines printed no %q:\n%s", want, out)
		}
	}
}

// graphModules counts the distinct modules in go mod graph's output.
func graphModules(graph string) int {
	seen := map[string]bool{}
	for _, m := range strings.Fields(graph) {
		path, _, _ := strings.Cut(m, "@")
		seen[path] = true
	}
	return len(seen)
}
