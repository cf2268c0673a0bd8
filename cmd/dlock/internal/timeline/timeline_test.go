package timeline

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Everything recorded shows up in the picture, which is well-formed SVG,
// and a nil Recorder records nothing without failing.
func TestSVG(t *testing.T) {
	var none *Recorder
	none.Bar("a", time.Now(), time.Now(), Held, "")

	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := New("test <run>")
	r.Lane("worker 0")
	r.Bar("worker 0", at(0), at(300), Held, "section a")
	r.Bar("worker 1", at(200), at(400), Held, "section b")
	r.Bar("worker 0", at(200), at(300), Overlap, "both inside")
	r.Bar("worker 1", at(200), at(200), Overlap, "both inside")
	r.Bar("worker 0", at(50), at(250), Paused, "paused")
	r.Band(at(100), at(120), ServerFault, "restart")
	r.Mark("worker 1", at(350), Accepted, "write accepted")
	r.Mark("worker 0", at(320), Rejected, "stale write")
	r.Notef("SAFE %d", 1)
	var b bytes.Buffer
	if err := r.SVG(&b); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b.Bytes(), new(struct{})); err != nil {
		t.Fatalf("not XML: %v\n%s", err, b.String())
	}
	svg := b.String()
	for _, want := range []string{"test &lt;run&gt;", ">worker 0<", ">worker 1<", colours[Overlap], colours[Paused],
		colours[ServerFault], colours[Accepted], colours[Rejected], "<title>both inside</title>", ">SAFE 1<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("no %q in the SVG", want)
		}
	}
	if strings.Index(svg, ">worker 0<") > strings.Index(svg, ">worker 1<") {
		t.Error("lanes out of the order they were declared in")
	}

	path := filepath.Join(t.TempDir(), "t.html")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(page), "<!DOCTYPE html>") || !strings.Contains(string(page), "<svg ") {
		t.Errorf("the .html file is not a page with the SVG in it:\n%.200s", page)
	}
}
