package main

import (
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// backup is `kubectl dbkeeper backup NAME`: it creates a Backup of the
// Database and waits until it is Completed or Failed.
func backup(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("backup", stdout, stderr)
	name := c.fs.String("name", "", "the Backup's name (default NAME-YYYYMMDDhhmmss, UTC)")
	timeout := c.fs.Duration("timeout", time.Hour, "how long to wait for the backup")
	wait := c.fs.Bool("wait", true, "wait until the Backup is Completed or Failed")
	if code, ok := c.parse(args, 1, "one Database"); !ok {
		return code
	}
	s, db, ok := c.connectDatabase()
	if !ok {
		return exitError
	}
	if db.Spec.Backup == nil {
		c.errorf("%s/%s has no spec.backup: set spec.backup.objectStore first (docs/backup.md)", db.Namespace, db.Name)
		return exitError
	}
	if *name == "" {
		*name = fmt.Sprintf("%s-%s", db.Name, time.Now().UTC().Format("20060102150405"))
	}
	b := &dbv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: *name, Labels: map[string]string{dbv1.LabelBackupDatabase: db.Name}},
		Spec:       dbv1.BackupSpec{Database: db.Name},
	}
	ctx, cancel := s.request()
	err := s.client.Create(ctx, b)
	cancel()
	if err != nil {
		c.errorf("creating the Backup %s/%s: %v", db.Namespace, *name, err)
		return exitError
	}
	c.printf("backup.dbkeeper.io/%s created", b.Name)
	if !*wait {
		return exitReady
	}
	return c.wait(*timeout, "the Backup "+b.Name, func() (progress, error) {
		ctx, cancel := s.request()
		defer cancel()
		if err := s.client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return progress{}, err
		}
		return backupProgress(b), nil
	})
}

// backupProgress is where Backup b is: done when Completed (exit 0) or
// Failed (exit 1).
func backupProgress(b *dbv1.Backup) progress {
	st := b.Status
	line := string(st.Phase)
	if line == "" {
		line = string(dbv1.BackupPhasePending)
	}
	if st.Pod != "" {
		line += " on " + st.Pod
	}
	if st.BackupID != "" {
		line += ", backup " + st.BackupID
	}
	switch st.Phase {
	case dbv1.BackupPhaseCompleted:
		line += fmt.Sprintf(": WAL %s to %s", or(st.BeginWAL, "?"), or(st.EndWAL, "?"))
		if st.StartedAt != nil && st.StoppedAt != nil {
			line += ", in " + st.StoppedAt.Sub(st.StartedAt.Time).Round(time.Second).String()
		}
		return progress{line: line, done: true, code: exitReady}
	case dbv1.BackupPhaseFailed:
		return progress{line: line + ": " + oneLine(st.Error), done: true, code: exitNotReady}
	}
	if st.Error != "" {
		line += ": " + oneLine(st.Error)
	}
	return progress{line: line}
}
