package bench

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// The small-file workloads' inputs, generated deterministically (the same
// bytes in every run) in the guest's local memory, so that reading them
// costs neither client anything.

// treeTime is the modification time of every generated file.
var treeTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fillText fills b with printable, source-like bytes: lines of words.
func fillText(rng *rand.Rand, b []byte) {
	const words = "func return if else for range var const type struct package import nil err ctx buf int string byte"
	for i := 0; i < len(b); {
		if rng.IntN(12) == 0 {
			b[i] = '\n'
			i++
			continue
		}
		w := rng.IntN(len(words) - 8)
		for j := w; j < len(words) && i < len(b) && words[j] != ' '; j++ {
			b[i] = words[j]
			i++
		}
		if i < len(b) {
			b[i] = ' '
			i++
		}
	}
}

// WriteSmallTarball writes a tar archive of files of sizeKiB each spread
// over dirs directories (d00/f000...), and returns the number of files.
func WriteSmallTarball(path string, files, dirs, sizeKiB int) (int, error) {
	if files <= 0 || dirs <= 0 || files%dirs != 0 {
		return 0, fmt.Errorf("bench: %d files in %d directories", files, dirs)
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(f)
	tw := tar.NewWriter(bw)
	rng := rand.New(rand.NewPCG(11, 12))
	data := make([]byte, sizeKiB<<10)
	for d := range dirs {
		dn := fmt.Sprintf("d%02d", d)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dn + "/", Mode: 0o755, ModTime: treeTime}); err != nil {
			return 0, err
		}
		for i := range files / dirs {
			fillText(rng, data)
			h := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%s/f%03d", dn, i), Mode: 0o644, Size: int64(len(data)), ModTime: treeTime}
			if err := tw.WriteHeader(h); err != nil {
				return 0, err
			}
			if _, err := tw.Write(data); err != nil {
				return 0, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	return files, f.Close()
}

// SourceTree describes a generated source-like tree.
type SourceTree struct {
	Files, Dirs int
	Bytes       int64
}

// WriteSourceTree creates under root a source-like tree of files files of
// 1–64 KiB (most of them small) in nested directories (three levels).
func WriteSourceTree(root string, files int) (SourceTree, error) {
	rng := rand.New(rand.NewPCG(21, 22))
	var dirs []string
	for a := range 8 {
		top := filepath.Join(root, fmt.Sprintf("pkg%d", a))
		dirs = append(dirs, top)
		for b := range 4 {
			sub := filepath.Join(top, fmt.Sprintf("sub%d", b))
			dirs = append(dirs, sub)
			for c := range 2 {
				dirs = append(dirs, filepath.Join(sub, fmt.Sprintf("internal%d", c)))
			}
		}
	}
	t := SourceTree{Dirs: len(dirs)}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return t, err
		}
	}
	buf := make([]byte, 64<<10)
	for i := range files {
		u := rng.Float64()
		size := 1024 + int(u*u*u*63*1024) // 1–64 KiB, mean about 17 KiB
		b := buf[:size]
		fillText(rng, b)
		p := filepath.Join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("file%04d.go", i))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return t, err
		}
		if err := os.Chtimes(p, treeTime, treeTime); err != nil {
			return t, err
		}
		t.Files++
		t.Bytes += int64(size)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i], treeTime, treeTime); err != nil {
			return t, err
		}
	}
	return t, nil
}

// makeEmptyFiles creates n empty files named prefix0000... in dir.
func makeEmptyFiles(dir, prefix string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s%05d", prefix, i)))
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// countingWriter counts the bytes written to it.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)

// newRand is a deterministic generator.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed+1)) }
