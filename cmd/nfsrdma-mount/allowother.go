package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Who may use a mount besides the one who mounted it (allow_other).
//
// Root's mounts are open to every user, as mount.nfs's are; noallow_other
// keeps one to root. A user's mount is the user's own, as every FUSE mount
// is; allow_other opens it to the others where the administrator allowed
// that in fusermount's configuration, /etc/fuse.conf, with a line
// user_allow_other (fusermount3 refuses it otherwise, and this helper says
// so before reaching the server). Either way each user's calls carry that
// user's own credential (fusefs.Options.CallerIdentity), unless uid= or
// gid= fix one identity for all.

// fuseConf is fusermount's configuration file (a variable for tests).
var fuseConf = "/etc/fuse.conf"

// allowOther decides whether the mount lets other users in, for a
// process of effective user euid: the option given, else yes for root.
// A user's allow_other needs user_allow_other in fuseConf.
func allowOther(o *mountOptions, euid int) (bool, error) {
	if o.AllowOther == nil {
		return euid == 0, nil
	}
	if !*o.AllowOther || euid == 0 {
		return *o.AllowOther, nil
	}
	ok, err := userAllowOther(fuseConf)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("allow_other: a user's mount may be opened to other users only where %s has the line user_allow_other, and there is no %s: ask the administrator to add that line, or mount without allow_other", fuseConf, fuseConf)
	case err != nil:
		return false, fmt.Errorf("allow_other: reading %s: %w", fuseConf, err)
	case !ok:
		return false, fmt.Errorf("allow_other: a user's mount may be opened to other users only where %s has the line user_allow_other, and it has none: ask the administrator to add that line, or mount without allow_other", fuseConf)
	}
	return true, nil
}

// userAllowOther reports whether the fuse.conf at path has a
// user_allow_other line, read as fusermount reads it: '#' starts a
// comment, blanks around an option are not part of it.
func userAllowOther(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "user_allow_other" {
			return true, nil
		}
	}
	return false, sc.Err()
}
