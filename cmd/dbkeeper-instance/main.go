// Command dbkeeper-instance is the instance agent: PID 1 of a PostgreSQL
// container, it runs the server as its child and converges it on the role
// the operator sends (internal/instance/agent, speaking the contract of internal/instance;
// docs/replication.md §3).
//
//	dbkeeper-instance install DIR               copy this binary to DIR (init container)
//	dbkeeper-instance run [--listen :8008] [--metrics-listen :9187] -- FLAGS   run the server with FLAGS, serving the agent API over
//	                                              mutual TLS and the metrics over plain HTTP
//	dbkeeper-instance archiver [--socket PATH]         serve barman-cloud to the server (backup sidecar)
//	dbkeeper-instance archive [--socket PATH] WAL      archive_command: archive %p through the sidecar
//	dbkeeper-instance restore [--socket PATH] [--recovery] NAME DEST restore_command: fetch %f into %p through the sidecar
//	                                              (--recovery: from spec.bootstrap.recovery's source)
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
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/archiver/sidecar"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/agent"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
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
	case archiver.CommandServe:
		err = serveArchiver(os.Args[2:])
	case archiver.CommandArchive:
		err = archiveWAL(os.Args[2:])
	case archiver.CommandRestore:
		err = restoreWAL(os.Args[2:])
	default:
		usage()
	}
	var startErr *postgres.StartError
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
	fmt.Fprintf(os.Stderr, "usage: dbkeeper-instance %s DIR | %s [--listen ADDR] [--metrics-listen ADDR] -- SERVER-FLAGS | %s [--socket PATH] | %s [--socket PATH] WAL | %s [--socket PATH] [--recovery] NAME DEST\n",
		instance.CommandInstall, instance.CommandRun, archiver.CommandServe, archiver.CommandArchive, archiver.CommandRestore)
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
	listen := fs.String("listen", ":"+strconv.Itoa(instance.Port), "the agent API's HTTPS listen address")
	metrics := fs.String("metrics-listen", "", "the metrics' plain HTTP listen address (default: --listen's host, port "+strconv.Itoa(instance.MetricsPort)+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := agent.ConfigFromEnv(*listen, fs.Args())
	if err != nil {
		return err
	}
	cfg.MetricsListen = *metrics
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agent.New(cfg).Run(ctx)
}

// socketFlag parses a subcommand's --socket flag and returns the socket
// and the remaining arguments, which must number want.
func socketFlag(name string, args []string, want int) (string, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	socket := fs.String("socket", archiver.DefaultSocket, "the backup sidecar's Unix socket")
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	if fs.NArg() != want {
		usage()
	}
	return *socket, fs.Args(), nil
}

// serveArchiver runs the backup sidecar's server until SIGTERM or SIGINT.
func serveArchiver(args []string) error {
	socket, _, err := socketFlag(archiver.CommandServe, args, 0)
	if err != nil {
		return err
	}
	srv, err := sidecar.ServerFromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return srv.Serve(ctx, socket)
}

// walTimeout bounds archive_command and restore_command: longer than the
// sidecar's own bound on one barman-cloud run, so that the sidecar's
// reason is what PostgreSQL logs.
const walTimeout = 6 * time.Minute

// archiveWAL is archive_command: it exits 0 only once the sidecar has put
// the file in the object store. PostgreSQL runs it in the data directory,
// which the sidecar mounts at the same path.
func archiveWAL(args []string) error {
	socket, rest, err := socketFlag(archiver.CommandArchive, args, 1)
	if err != nil {
		return err
	}
	path, err := filepath.Abs(rest[0])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), walTimeout)
	defer cancel()
	return archiver.NewClient(socket).Archive(ctx, path)
}

// restoreWAL is restore_command: it exits 0 only once the sidecar has
// written the file; PostgreSQL takes any other exit as "not available".
func restoreWAL(args []string) error {
	fs := flag.NewFlagSet(archiver.CommandRestore, flag.ContinueOnError)
	socket := fs.String("socket", archiver.DefaultSocket, "the backup sidecar's Unix socket")
	recovery := fs.Bool("recovery", false, "fetch from spec.bootstrap.recovery's source, not the Database's own store")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		usage()
	}
	dest, err := filepath.Abs(fs.Arg(1))
	if err != nil {
		return err
	}
	if !*recovery && archiver.HeldInPGWAL(filepath.Dir(dest), fs.Arg(0)) {
		// The server reads it from its own pg_wal: no fetch from the
		// store, no line in the server's log.
		os.Exit(1)
	}
	if end, past := archiver.PastItsTimelinesEnd(filepath.Dir(dest), fs.Arg(0)); past {
		// WAL a former primary wrote past the fork: the newer timeline's
		// segment of the same number is the one to replay.
		fmt.Fprintf(os.Stderr, "dbkeeper-instance restore: %s is not restored: it holds WAL past the end of its timeline: %s\n", fs.Arg(0), end)
		os.Exit(1)
	}
	if !*recovery && archiver.TakeStreamNext(*socket, fs.Arg(0)) {
		// The agent asked that this standby stream from its primary:
		// "not available", without a line in the server's log.
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), walTimeout)
	c := archiver.NewClient(*socket)
	if *recovery {
		err = c.RestoreFromRecovery(ctx, fs.Arg(0), dest)
	} else {
		err = c.Restore(ctx, fs.Arg(0), dest)
	}
	cancel()
	if errors.Is(err, archiver.ErrNotInArchive) {
		// The answer recovery expects past the end of the archive: exit
		// 1 without a line in the server's log.
		os.Exit(1)
	}
	return err
}
