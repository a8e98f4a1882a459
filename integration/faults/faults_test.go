package faults

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLedgerVerify(t *testing.T) {
	dir := t.TempDir()
	var l Ledger
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "hello")
	write("b", "world")
	l.Record("a", []byte("hello"))
	l.Record("b", []byte("world"))
	if files, n, err := l.Verify(dir); err != nil || files != 2 || n != 10 {
		t.Fatalf("Verify: %d files, %d bytes, %v", files, n, err)
	}
	write("b", "worle")
	l.Record("c", []byte("x"))
	files, _, err := l.Verify(dir)
	if files != 1 || err == nil || !strings.Contains(err.Error(), "b: content differs") || !strings.Contains(err.Error(), "c:") {
		t.Fatalf("Verify of a changed and a missing file: %d, %v", files, err)
	}
	write("b", "worl")
	if _, _, err := l.Verify(dir); err == nil || !strings.Contains(err.Error(), "4 bytes on the server, 5 written") {
		t.Fatalf("a short file: %v", err)
	}
	l.Forget("b")
	l.Forget("c")
	if l.Len() != 1 {
		t.Fatal(l.Len())
	}
}

func TestCompare(t *testing.T) {
	if Compare([]byte("abc"), []byte("abc")) != -1 || Compare([]byte("abd"), []byte("abc")) != 2 || Compare([]byte("ab"), []byte("abc")) != 2 {
		t.Fatal("Compare")
	}
}

func TestTableMarkdownAndFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "faults.md")
	tb := NewTable("Faults", path)
	var es ErrorSet
	es.Add(errors.New("boom | pipe"))
	es.Add(errors.New("boom | pipe"))
	es.Add(nil)
	if es.Len() != 2 {
		t.Fatal(es.Len())
	}
	tb.Add(Row{Fault: "knfsd restart", Workload: "library WRITE", Ops: 3, Bytes: 3 << 20, Recovery: 1500 * time.Millisecond, Resources: "none", Pass: true})
	tb.Add(Row{Fault: "qp error", Workload: "w", Unexpected: 2, Errors: es.String(), Faults: 3})
	tb.Note("soak %s", "2m")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"# Faults", "| knfsd restart | library WRITE | 3 | 3.0 MiB | 0 | 0 | 1.5s | none | pass |", `2 (2× boom \| pipe)`, "qp error (×3)", "**FAIL**", "- soak 2m"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if len(tb.Rows()) != 2 {
		t.Fatal("rows")
	}
}

func TestProgressWait(t *testing.T) {
	var p Progress
	start := time.Now()
	go func() {
		time.Sleep(20 * time.Millisecond)
		p.Done(10)
		p.Done(10)
	}()
	at, ok := p.WaitAfter(start, 5*time.Second)
	if !ok || !at.After(start) {
		t.Fatal("WaitAfter")
	}
	if _, ok := p.WaitOps(5, 50*time.Millisecond); ok {
		t.Fatal("WaitOps without operations returned true")
	}
	if p.Bytes() < 10 {
		t.Fatal(p.Bytes())
	}
}

func TestDriverCoversEveryFault(t *testing.T) {
	seen := map[string]int{}
	var faults []Fault
	for _, name := range []string{"a", "b", "c"} {
		faults = append(faults, Fault{Name: name, Inject: func(context.Context) error { seen[name]++; return nil }})
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Driver{Faults: faults, Min: time.Millisecond, Max: 2 * time.Millisecond, Rand: rand.New(rand.NewPCG(1, 2))}
	d.OnEvent = func(Event) {
		if len(d.Events()) == 6 {
			cancel()
		}
	}
	d.Run(ctx)
	if seen["a"] != 2 || seen["b"] != 2 || seen["c"] != 2 {
		t.Fatalf("two passes injected %v", seen)
	}
}

func TestSnapshotDelta(t *testing.T) {
	a := Take(nil)
	if a.FDs <= 0 || a.Goroutines <= 0 {
		t.Fatalf("%+v", a)
	}
	if a.Delta(a) != "none" {
		t.Fatal(a.Delta(a))
	}
	b := a
	b.Verbs.MWs += 4
	b.FDs--
	if d := a.Delta(b); d != "MWs +4, fds -1" {
		t.Fatal(d)
	}
	if p := TakeProcess(os.Getpid()); p.Threads <= 0 || p.FDs <= 0 {
		t.Fatalf("%+v", p)
	}
	if s := Settle(a, 10*time.Millisecond, func() Snapshot { return b }); s != b {
		t.Fatal("Settle")
	}
}
