// Package testbed builds and boots the nfsrdma test bed: a Debian bookworm
// guest (kernel 6.1 with rdma_rxe, nfsd and svcrdma) run under qemu's TCG
// emulation, with Soft-RoCE (rxe0 on dummy0, 10.99.0.1/24, MTU 9000) and
// the Linux NFS server exporting a tmpfs at /export (secure, root_squash)
// and another at /export-insecure (insecure, no_root_squash) over tcp 2049
// and rdma 20049. Host-built binaries reach the guest over a 9p share.
//
// The host kernel of the machines this project runs on has no RDMA and no
// NFS, and its KVM cannot run stock kernels, so every claim about real RDMA
// is proven inside this guest (see the README's "The test bed" section).
package testbed

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"
)

// RecipeVersion changes whenever the build steps change in a way the
// hashed inputs below do not capture.
const RecipeVersion = 1

const (
	Suite  = "bookworm"
	Mirror = "http://deb.debian.org/debian"
	// ImageSize is the root image size given to mkfs.ext4.
	ImageSize = "2G"
	// ServerAddr is the guest's address on dummy0, where rxe0 and knfsd are.
	ServerAddr = "10.99.0.1"
)

// HostPackages are the Debian packages the host needs: to build and boot the
// guest, and to build the cgo verbs binding.
var HostPackages = []string{
	"qemu-system-x86", "debootstrap", "e2fsprogs", "cpio", "busybox-static",
	"libibverbs-dev", "librdmacm-dev",
}

// GuestPackages are installed into the guest root with apt.
var GuestPackages = []string{
	"linux-image-amd64", "nfs-kernel-server", "rdma-core", "ibverbs-providers",
	"ibverbs-utils", "librdmacm1", "rdmacm-utils", "perftest", "fio", "iproute2",
	"kmod", "procps", "util-linux", "fuse3", "diffutils", "e2fsprogs", "acl",
}

// initrdModules are the modules the tiny initramfs loads to reach the root
// disk; their dependencies are resolved with modprobe at build time.
var initrdModules = []string{"virtio_pci", "virtio_blk", "ext4"}

//go:embed guest/initramfs-init
var initramfsInit string

//go:embed guest/testbed-init
var guestInit string

//go:embed guest/nfsd-restart
var nfsdRestart string

// exportsLine is the guest's /etc/exports. The main export, /export, has
// exports(5)'s defaults (secure: MOUNT and NFS over TCP from reserved ports
// only; root_squash: root acts as nobody, 65534), so every test sees what
// users see. /export-insecure (insecure, no_root_squash) is for the few
// tests that need what a default export refuses: a client on an ordinary
// source port (noresvport), and root acting as root on the server (a
// library client that sets any owner with SETATTR). /export-squash
// (all_squash, anonuid=anongid=1500) maps every caller to one anonymous
// owner, and /export-ext4 is an ext4 file system on a loop device, which
// reuses a freed inode number at once (tmpfs does not), for the semantics
// scenarios that need either.
const exportsLine = "/export *(rw,secure,root_squash,no_subtree_check,fsid=1)\n" +
	"/export-insecure *(rw,insecure,no_root_squash,no_subtree_check,fsid=2)\n" +
	"/export-squash *(rw,secure,all_squash,anonuid=1500,anongid=1500,no_subtree_check,fsid=3)\n" +
	"/export-ext4 *(rw,insecure,no_root_squash,no_subtree_check,fsid=4)\n"

// Key is the hash of everything that defines the guest image. A cached
// image is reused only when its key matches.
func Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "recipe %d\nsuite %s\nmirror %s\nsize %s\n", RecipeVersion, Suite, Mirror, ImageSize)
	fmt.Fprintf(h, "guest %s\ninitrd %s\n", strings.Join(GuestPackages, " "), strings.Join(initrdModules, " "))
	for _, f := range []string{initramfsInit, guestInit, nfsdRestart, exportsLine} {
		fmt.Fprintf(h, "%d\n%s", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
