package testbed

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Progress prints build steps with their elapsed times, and a counter for
// the long ones.
type Progress struct {
	w     io.Writer
	tty   bool
	start time.Time
	n     int
	total int
}

// NewProgress writes to w; total is the number of steps.
func NewProgress(w io.Writer, total int) *Progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &Progress{w: w, tty: tty, start: time.Now(), total: total}
}

// Step runs fn as the next numbered step and reports how long it took.
func (p *Progress) Step(name string, fn func() error) error {
	p.n++
	t0 := time.Now()
	fmt.Fprintf(p.w, "[testbed %2d/%d] %s ...\n", p.n, p.total, name)
	err := fn()
	d := time.Since(t0).Round(100 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(p.w, "[testbed %2d/%d] %s FAILED after %s\n", p.n, p.total, name, d)
		return err
	}
	fmt.Fprintf(p.w, "[testbed %2d/%d] %s done in %s (total %s)\n", p.n, p.total, name, d, time.Since(p.start).Round(time.Second))
	return nil
}

// Counter returns a writer that counts the lines of a command's output
// matching re and shows the count (and total when known), keeping the
// last lines for error messages.
func (p *Progress) Counter(label string, re *regexp.Regexp, total *regexp.Regexp) *LineCounter {
	pr, pw := io.Pipe()
	c := &LineCounter{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		last := time.Now()
		n, tot := 0, 0
		for sc.Scan() {
			line := sc.Text()
			c.keep(line)
			if total != nil {
				if m := total.FindStringSubmatch(line); m != nil {
					fmt.Sscan(m[1], &tot)
				}
			}
			if !re.MatchString(line) {
				continue
			}
			n++
			show := fmt.Sprintf("%d", n)
			if tot > 0 {
				show = fmt.Sprintf("%d/%d", n, tot)
			}
			if p.tty {
				fmt.Fprintf(p.w, "\r  %s: %s  ", label, show)
			} else if time.Since(last) > 10*time.Second {
				fmt.Fprintf(p.w, "  %s: %s (%s)\n", label, show, time.Since(p.start).Round(time.Second))
				last = time.Now()
			}
		}
		if p.tty && n > 0 {
			fmt.Fprintln(p.w)
		}
		io.Copy(io.Discard, pr)
	}()
	return c
}

// LineCounter is the writer side of Progress.Counter.
type LineCounter struct {
	pw   *io.PipeWriter
	done chan struct{}
	mu   sync.Mutex
	tail []string
}

func (c *LineCounter) Write(b []byte) (int, error) { return c.pw.Write(b) }

func (c *LineCounter) keep(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tail = append(c.tail, line)
	if len(c.tail) > 30 {
		c.tail = c.tail[len(c.tail)-30:]
	}
}

// Close ends the count and returns the last lines seen.
func (c *LineCounter) Close() string {
	c.pw.Close()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}
