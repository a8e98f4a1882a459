package nfs4_test

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"
	"time"

	"github.com/nfsrdma/nfsrdma/nfs4"
)

// Mount an export with NFSv4.1 over TCP, write a file and list the root.
// (nfsrdma.MountV4 does the same over RDMA.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg, err := nfs4.MountTCP(ctx, "server:/export", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tg.Close()
	f, err := tg.OpenFileContext(ctx, "hello.txt", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f.WriteAtContext(ctx, []byte("hello\n"), 0); err != nil {
		log.Fatal(err)
	}
	if err := f.CloseContext(ctx); err != nil {
		log.Fatal(err)
	}
	err = fs.WalkDir(tg, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fmt.Println(p)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
