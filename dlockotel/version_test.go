package dlockotel_test

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
)

// TestScopeVersion: the meter's and the tracer's instrumentation scope
// carry the module's version, so a backend can tell which dlockotel
// recorded what.
func TestScopeVersion(t *testing.T) {
	want := dlockotel.ScopeVersion()
	if want == "" {
		t.Fatal("the build information gives no version of dlockotel")
	}
	r := newRecorded(t)
	if err := dlock.Do(context.Background(), newMem(r.obs.Observe), "k", time.Second, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	span := r.one(t, "dlock.acquire")
	if s := span.InstrumentationScope; s.Name != "github.com/dlock-go/dlock/dlockotel" || s.Version != want {
		t.Errorf("the tracer's scope is %q version %q, want version %q", s.Name, s.Version, want)
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 {
		t.Fatalf("%d metric scopes, want 1", len(rm.ScopeMetrics))
	}
	if s := rm.ScopeMetrics[0].Scope; s.Name != "github.com/dlock-go/dlock/dlockotel" || s.Version != want {
		t.Errorf("the meter's scope is %q version %q, want version %q", s.Name, s.Version, want)
	}
}

// TestModuleVersion: the version is found whether dlockotel is the main
// module, a dependency, or a replaced one.
func TestModuleVersion(t *testing.T) {
	const path = "github.com/dlock-go/dlock/dlockotel"
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"main module", debug.BuildInfo{Main: debug.Module{Path: path, Version: "(devel)"}}, "(devel)"},
		{"dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: "github.com/dlock-go/dlock", Version: "v0.1.0"}, {Path: path, Version: "v0.1.2"}}}, "v0.1.2"},
		{"replaced by a version", debug.BuildInfo{Deps: []*debug.Module{{Path: path, Version: "v0.1.2",
			Replace: &debug.Module{Path: "example.com/fork", Version: "v0.1.3"}}}}, "v0.1.3"},
		{"replaced by a directory", debug.BuildInfo{Deps: []*debug.Module{{Path: path, Version: "v0.1.2",
			Replace: &debug.Module{Path: "../dlockotel"}}}}, "(devel)"},
		{"absent", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, ""},
	} {
		if got := dlockotel.ModuleVersion(&c.bi, path); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
