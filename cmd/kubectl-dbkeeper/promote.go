package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// promote is `kubectl dbkeeper promote NAME POD`: a switchover through
// spec.primary, then a wait until POD is the primary and ready.
func promote(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("promote", stdout, stderr)
	timeout := c.fs.Duration("timeout", 10*time.Minute, "how long to wait for the switchover")
	wait := c.fs.Bool("wait", true, "wait until the pod is the primary")
	if code, ok := c.parse(args, 2, "the Database and the pod to promote"); !ok {
		return code
	}
	name, pod := c.fs.Arg(0), c.fs.Arg(1)
	s, ok := c.connect()
	if !ok {
		return exitError
	}
	db, err := s.database(name)
	if err != nil {
		c.errorf("%v", err)
		return exitError
	}
	if problem := promoteProblem(db, pod); problem != "" {
		c.errorf("%s", problem)
		return exitError
	}
	if db.Status.CurrentPrimary == pod && db.Status.TargetPrimary == "" && (db.Spec.Primary == "" || db.Spec.Primary == pod) {
		c.printf("%s is already the primary of %s/%s (term %d)", pod, db.Namespace, db.Name, db.Status.Term)
		return exitReady
	}
	if db.Spec.Primary != pod {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"primary": pod}})
		ctx, cancel := s.request()
		err := s.client.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch))
		cancel()
		if err != nil {
			c.errorf("setting spec.primary of %s/%s to %s: %v", db.Namespace, db.Name, pod, err)
			return exitError
		}
	}
	c.printf("spec.primary of %s/%s is %s: dbkeeper switches the primary over from %s, with no committed transaction lost", db.Namespace, db.Name, pod, or(db.Status.CurrentPrimary, "none"))
	if !*wait {
		return exitReady
	}
	generation := db.Generation
	return c.wait(*timeout, "the switchover to "+pod, func() (progress, error) {
		db, err := s.database(name)
		if err != nil {
			return progress{}, err
		}
		return promoteProgress(db, pod, generation), nil
	})
}

// promoteProblem says why pod cannot be made the primary of db, "" when
// it can be asked.
func promoteProblem(db *dbv1.Database, pod string) string {
	replicas := int32(1)
	if db.Spec.Replicas != nil {
		replicas = *db.Spec.Replicas
	}
	ordinal, err := strconv.Atoi(strings.TrimPrefix(pod, db.Name+"-"))
	switch {
	case db.Spec.Engine == dbv1.EngineMySQL:
		return fmt.Sprintf("%s/%s is a mysql Database: it runs one server, with no standby to promote", db.Namespace, db.Name)
	case replicas < 2:
		return fmt.Sprintf("%s/%s runs one server (spec.replicas 1): there is no standby to promote; raise spec.replicas first", db.Namespace, db.Name)
	case !strings.HasPrefix(pod, db.Name+"-") || err != nil || ordinal < 0 || int32(ordinal) >= replicas || pod != fmt.Sprintf("%s-%d", db.Name, ordinal):
		return fmt.Sprintf("%s is not a pod of %s/%s: its pods are %s-0 to %s-%d", pod, db.Namespace, db.Name, db.Name, db.Name, replicas-1)
	}
	return ""
}

// promoteProgress is where the switchover of db to pod is: done once pod
// is the primary, no change of primary runs and pod is ready; over with
// exit 1 when the Database is Stalled, or spec.primary names another pod.
func promoteProgress(db *dbv1.Database, pod string, generation int64) progress {
	st := db.Status
	line := "primary " + or(st.CurrentPrimary, "none") + fmt.Sprintf(", term %d", st.Term)
	if st.TargetPrimary != "" && st.TargetPrimary != st.CurrentPrimary {
		line += ", changing to " + st.TargetPrimary
	}
	switching := meta.FindStatusCondition(st.Conditions, dbv1.ConditionSwitchingOver)
	ready := meta.FindStatusCondition(st.Conditions, dbv1.ConditionReady)
	switch {
	case switching != nil && switching.Status == metav1.ConditionTrue:
		line += ": " + switching.Reason + ": " + oneLine(switching.Message)
	case ready != nil && ready.Message != "":
		line += ": " + ready.Reason + ": " + oneLine(ready.Message)
	}
	if stalled := meta.FindStatusCondition(st.Conditions, dbv1.ConditionStalled); stalled != nil && stalled.Status == metav1.ConditionTrue &&
		stalled.ObservedGeneration >= generation {
		return progress{line: line + "; Stalled: " + stalled.Reason + ": " + oneLine(stalled.Message), done: true, code: exitNotReady}
	}
	if db.Spec.Primary != pod {
		return progress{line: fmt.Sprintf("%s; spec.primary is now %q, set by someone else: not waiting for %s any more", line, db.Spec.Primary, pod), done: true, code: exitNotReady}
	}
	if st.CurrentPrimary != pod || st.TargetPrimary != "" || (switching != nil && switching.Status == metav1.ConditionTrue) {
		return progress{line: line}
	}
	for _, in := range st.Instances {
		if in.Name == pod && !in.Ready {
			return progress{line: line + "; " + pod + " is not ready yet: " + or(in.Message, "-")}
		}
	}
	return progress{line: fmt.Sprintf("%s is the primary (term %d)", pod, st.Term), done: true, code: exitReady}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// oneLine is s on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
