package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// recloneReasons are the Stalled reasons of a standby that a re-clone
// fixes (dbv1.AnnotationReclone).
var recloneReasons = []string{dbv1.ReasonNotStreaming, dbv1.ReasonRewindFailed, dbv1.ReasonSlotInvalidated, dbv1.ReasonCloneFailed}

// reclone is `kubectl dbkeeper reclone POD`: it authorises a standby that
// cannot follow its primary to replace its data directory with a new
// clone (the Database's annotation dbkeeper.io/reclone), after saying what
// that discards; it acts only with --yes.
func reclone(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("reclone", stdout, stderr)
	yes := c.fs.Bool("yes", false, "go ahead: discard what the standby holds that the primary lacks")
	timeout := c.fs.Duration("timeout", 30*time.Minute, "how long to wait for the standby to stream again")
	wait := c.fs.Bool("wait", true, "wait until the standby streams again")
	if code, ok := c.parse(args, 1, "one pod"); !ok {
		return code
	}
	podName := c.fs.Arg(0)
	s, ok := c.connect()
	if !ok {
		return exitError
	}
	pod := &corev1.Pod{}
	ctx, cancel := s.request()
	err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: podName}, pod)
	cancel()
	if err != nil {
		c.errorf("reading the pod %s/%s: %v", s.namespace, podName, err)
		return exitError
	}
	name := pod.Labels[desired.LabelInstance]
	if name == "" || pod.Labels[desired.LabelManagedBy] != desired.ManagedByValue {
		c.errorf("%s/%s is not a pod of a Database (it lacks the labels app.kubernetes.io/instance and managed-by=dbkeeper)", s.namespace, podName)
		return exitError
	}
	db, err := s.database(name)
	if err != nil {
		c.errorf("%v", err)
		return exitError
	}
	stuck, problem := recloneCheck(db, podName)
	if problem != "" {
		c.errorf("%s", problem)
		return exitError
	}
	primary := db.Status.CurrentPrimary
	c.printf("%s cannot follow the primary %s: %s", podName, primary, stuck)
	c.printf("A re-clone stops %s's server and replaces its data directory with a new copy of %s (pg_basebackup)."+
		" It discards whatever %s holds that %s lacks: WAL it wrote or received beyond the point where it left the primary's history."+
		" The volume (PersistentVolumeClaim %s) and every other pod are kept; %s is not ready while it clones.",
		podName, primary, podName, primary, desired.VolumeData+"-"+podName, podName)
	if !*yes {
		c.errorf("nothing done: run again with --yes to re-clone %s", podName)
		return exitNotReady
	}
	value := podName + "=" + strconv.FormatInt(time.Now().Unix(), 10)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{dbv1.AnnotationReclone: value}}})
	ctx, cancel = s.request()
	err = s.client.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch))
	cancel()
	if err != nil {
		c.errorf("annotating %s/%s with %s=%s: %v", db.Namespace, db.Name, dbv1.AnnotationReclone, value, err)
		return exitError
	}
	c.printf("database.dbkeeper.io/%s annotated %s=%s: %s's agent clones the primary again", db.Name, dbv1.AnnotationReclone, value, podName)
	if !*wait {
		return exitReady
	}
	return c.wait(*timeout, "the re-clone of "+podName, func() (progress, error) {
		db, err := s.database(name)
		if err != nil {
			return progress{}, err
		}
		return recloneProgress(db, podName), nil
	})
}

// recloneCheck returns why pod of db needs a re-clone (the Stalled
// condition's words about it), or the problem that forbids one.
func recloneCheck(db *dbv1.Database, pod string) (stuck, problem string) {
	if pod == db.Status.CurrentPrimary || pod == db.Status.TargetPrimary {
		return "", fmt.Sprintf("%s is the primary of %s/%s: only a standby is cloned again, from the primary; nothing done", pod, db.Namespace, db.Name)
	}
	if msg := stalledAbout(db, pod); msg != "" {
		return msg, ""
	}
	return "", fmt.Sprintf("%s follows the primary %s (no Stalled condition names it): a re-clone is for a standby that cannot follow; nothing done."+
		" (`kubectl dbkeeper status %s` shows each pod)", pod, or(db.Status.CurrentPrimary, "none"), db.Name)
}

// stalledAbout returns what the Stalled condition of db says about pod
// when it names pod with a reason a re-clone fixes, "" otherwise. The
// message lists each stuck standby as "pod NAME: REASON: ...", joined by
// "; ", the first one's reason being the condition's.
func stalledAbout(db *dbv1.Database, pod string) string {
	stalled := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionStalled)
	if stalled == nil || stalled.Status != metav1.ConditionTrue {
		return ""
	}
	for _, part := range strings.Split(stalled.Message, "; pod ") {
		part = strings.TrimPrefix(part, "pod ")
		rest, ok := strings.CutPrefix(part, pod+": ")
		if !ok || !slices.ContainsFunc(recloneReasons, func(r string) bool { return strings.HasPrefix(rest, r+": ") }) {
			continue
		}
		if i := strings.Index(rest, "; authorise a re-clone"); i >= 0 {
			rest = rest[:i]
		}
		return oneLine(rest)
	}
	return ""
}

// recloneProgress is where the re-clone of pod is: done once its instance
// is ready and the Stalled condition no longer names it.
func recloneProgress(db *dbv1.Database, pod string) progress {
	var in *dbv1.InstanceStatus
	for i := range db.Status.Instances {
		if db.Status.Instances[i].Name == pod {
			in = &db.Status.Instances[i]
		}
	}
	line := pod + ": "
	switch {
	case in == nil:
		line += "not reported yet"
	case in.Ready:
		line += "ready, streaming from " + or(db.Status.CurrentPrimary, "the primary")
	default:
		line += "not ready: " + or(in.Message, "-")
	}
	if msg := stalledAbout(db, pod); msg != "" {
		return progress{line: line + "; still stuck: " + msg}
	}
	if in == nil || !in.Ready {
		return progress{line: line}
	}
	return progress{line: line, done: true, code: exitReady}
}
