package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Guest runs benchmark jobs inside the test-bed guest.
type Guest struct {
	Server  string // the guest's RDMA address (10.99.0.1)
	Device  string // rxe0
	Export  string // knfsd's export (/export)
	Mount   string // where the kernel client mounts it
	FileMiB int    // fio file size
	Log     io.Writer
	Report  *Report
}

func (g *Guest) logf(format string, args ...any) {
	fmt.Fprintf(g.Log, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (g *Guest) fail(what string, err error) {
	g.logf("%s: %v", what, err)
	g.Report.Errors = append(g.Report.Errors, fmt.Sprintf("%s: %v", what, err))
}

func command(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// perftest runs one perftest pair (server in the background, client
// against it) over rdma_cm and returns the client's output.
func (g *Guest) perftest(ctx context.Context, tool string, args ...string) (string, error) {
	common := append([]string{"-d", g.Device, "-R", "-F"}, args...)
	srv := exec.CommandContext(ctx, tool, common...)
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return "", err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var out string
	var err error
	for try := 0; try < 10; try++ {
		time.Sleep(500 * time.Millisecond)
		out, err = command(ctx, tool, append(common, g.Server)...)
		if err == nil {
			return out, nil
		}
	}
	return out, fmt.Errorf("%w\nserver: %s", err, srvOut.String())
}

// Perftest measures the RDMA ceiling of the bed: ib_write_bw, ib_read_bw
// (64 KiB) and ib_send_lat.
func (g *Guest) Perftest(ctx context.Context) {
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		g.logf("%s 64KiB", tool)
		out, err := g.perftest(ctx, tool, "-s", "65536")
		if err != nil {
			g.fail(tool, err)
			continue
		}
		bw, err := ParsePerftestBW(out)
		if err != nil {
			g.fail(tool, err)
			continue
		}
		g.Report.Add(Measure{Group: "perftest", Name: tool + " 64KiB", Value: bw, Unit: "MiB/s"})
	}
	g.logf("ib_send_lat 2B")
	out, err := g.perftest(ctx, "ib_send_lat", "-s", "2")
	if err != nil {
		g.fail("ib_send_lat", err)
		return
	}
	typ, avg, err := ParsePerftestLat(out)
	if err != nil {
		g.fail("ib_send_lat", err)
		return
	}
	g.Report.Add(Measure{Group: "perftest", Name: "ib_send_lat typical", Value: typ, Unit: "us"})
	g.Report.Add(Measure{Group: "perftest", Name: "ib_send_lat avg", Value: avg, Unit: "us"})
}

// FioJob is one fio measurement.
type FioJob struct {
	Name    string // e.g. "seq-read 1MiB qd16"
	RW      string // read, write, randread, randwrite
	BS      string
	IODepth int
	Runtime int // seconds cap (time_based for random jobs)
}

// KernelFioJobs are the fio jobs run against the kernel client.
var KernelFioJobs = []FioJob{
	{"seq-write 1MiB qd1", "write", "1M", 1, 30},
	{"seq-write 1MiB qd16", "write", "1M", 16, 30},
	{"seq-read 1MiB qd1", "read", "1M", 1, 30},
	{"seq-read 1MiB qd16", "read", "1M", 16, 30},
	{"rand-read 4KiB qd32", "randread", "4k", 32, 10},
}

// Fio runs jobs on a file under dir and records them in group.
func (g *Guest) Fio(ctx context.Context, group, dir string, jobs []FioJob) {
	file := filepath.Join(dir, "fio-bench")
	// Lay the file out once so read jobs read real data.
	g.logf("%s: laying out a %d MiB file", group, g.FileMiB)
	if _, err := command(ctx, "fio", "--name=prefill", "--filename="+file, "--rw=write", "--bs=1M",
		fmt.Sprintf("--size=%dM", g.FileMiB), "--direct=1", "--ioengine=libaio", "--iodepth=16", "--output-format=json"); err != nil {
		g.fail(group+" prefill", err)
		return
	}
	for _, j := range jobs {
		g.logf("%s: fio %s", group, j.Name)
		args := []string{"--name=" + strings.ReplaceAll(j.Name, " ", "_"), "--filename=" + file, "--rw=" + j.RW, "--bs=" + j.BS,
			fmt.Sprintf("--size=%dM", g.FileMiB), "--direct=1", "--ioengine=libaio", fmt.Sprintf("--iodepth=%d", j.IODepth),
			fmt.Sprintf("--runtime=%d", j.Runtime), "--output-format=json"}
		if strings.HasPrefix(j.RW, "rand") {
			args = append(args, "--time_based", "--randrepeat=0")
		}
		out, err := command(ctx, "fio", args...)
		if err != nil {
			g.fail(group+" "+j.Name, err)
			continue
		}
		r, err := ParseFio([]byte(out))
		if err != nil {
			g.fail(group+" "+j.Name, err)
			continue
		}
		if r.Errors > 0 {
			g.fail(group+" "+j.Name, fmt.Errorf("fio reported %d job errors", r.Errors))
			continue
		}
		switch {
		case strings.HasPrefix(j.RW, "rand"):
			g.Report.Add(Measure{Group: group, Name: j.Name, Value: r.ReadIOPS + r.WriteIOPS, Unit: "IOPS"})
		default:
			g.Report.Add(Measure{Group: group, Name: j.Name, Value: r.ReadMiBps + r.WriteMiBps, Unit: "MiB/s"})
		}
	}
	os.Remove(file)
}

// KernelNFS mounts the export with the kernel's NFSv3/RDMA client and runs
// the fio jobs on it.
func (g *Guest) KernelNFS(ctx context.Context) {
	if err := os.MkdirAll(g.Mount, 0o755); err != nil {
		g.fail("kernel mount", err)
		return
	}
	if _, err := command(ctx, "mount", "-t", "nfs", "-o", "vers=3,proto=rdma,port=20049", g.Server+":"+g.Export, g.Mount); err != nil {
		g.fail("kernel mount", err)
		return
	}
	defer command(context.Background(), "umount", g.Mount)
	g.Fio(ctx, "kernel-nfs-rdma", g.Mount, KernelFioJobs)
}

// KernelVersion is the running kernel's release.
func KernelVersion() string {
	data, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(data))
}
