// Command dbkeeper-instance is the instance agent: PID 1 of a PostgreSQL
// container, it runs the server as its child and converges it on the role
// the operator sends (internal/instance, docs/replication.md §3).
//
//	dbkeeper-instance install DIR               copy this binary to DIR (init container)
//	dbkeeper-instance run [--listen :8008] -- FLAGS   run the server with FLAGS
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case instance.CommandInstall:
		if len(os.Args) != 3 {
			usage()
		}
		err = install(os.Args[2])
	case instance.CommandRun:
		err = run(os.Args[2:])
	default:
		usage()
	}
	var startErr *instance.StartError
	if errors.As(err, &startErr) {
		// Quietly: the server's own last words end the log (StartError).
		os.Exit(startErr.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dbkeeper-instance:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: dbkeeper-instance %s DIR | %s [--listen ADDR] -- SERVER-FLAGS\n", instance.CommandInstall, instance.CommandRun)
	os.Exit(2)
}

// install copies the running executable to DIR/dbkeeper-instance, mode
// 0755, through a temporary file and a rename.
func install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	dst := filepath.Join(dir, filepath.Base(instance.Binary))
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	listen := fs.String("listen", ":"+strconv.Itoa(instance.Port), "HTTP listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := instance.ConfigFromEnv(*listen, fs.Args())
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return instance.New(cfg).Run(ctx)
}
