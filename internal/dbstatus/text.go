package dbstatus

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for a terminal, ages counted to now:
//
//	Database shop/orders: postgres 17 (server 17.6), Degraded, not Ready
//	  endpoint orders.shop.svc:5432, 2/3 pods ready
//	  primary orders-0, term 3; switching over to orders-1
//
//	Conditions (problems first):
//	  ...
//	Instances:
//	  NAME  ROLE  READY  TIMELINE  LAG  VERSION  NODE  MESSAGE
//	Backups:
//	  ...
//	Recent warnings:
//	  ...
func (r *Report) WriteText(w io.Writer, now time.Time) error {
	var b strings.Builder
	ready := "Ready"
	if !r.Ready {
		ready = "not Ready"
	}
	version := r.Engine + " " + r.Version
	if r.ServerVersion != "" {
		version += " (server " + r.ServerVersion + ")"
	}
	fmt.Fprintf(&b, "Database %s/%s: %s, %s, %s\n", r.Namespace, r.Name, version, r.Phase, ready)
	fmt.Fprintf(&b, "  endpoint %s, %d/%d pods ready\n", or(r.Endpoint, "-"), r.ReadyReplicas, r.Replicas)
	primary := "  primary " + or(r.Primary, "none")
	if r.Term > 0 {
		primary += fmt.Sprintf(", term %d", r.Term)
	}
	if r.Synchronous > 0 {
		primary += fmt.Sprintf(", synchronous: %d standby must confirm each commit (%s)", r.Synchronous, r.quorum())
	}
	if r.TargetPrimary != "" && r.TargetPrimary != r.Primary {
		primary += "; changing to " + r.TargetPrimary
	}
	b.WriteString(primary + "\n")

	b.WriteString("\nConditions (problems first):\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range r.Conditions {
		mark := "ok"
		if c.Problem {
			mark = "!!"
		}
		fmt.Fprintf(tw, "  %s %s\t%s\t%s\t%s\t%s\n", mark, c.Type, c.Status, c.Reason, age(now, c.Since), oneLine(c.Message))
	}
	if len(r.Conditions) == 0 {
		fmt.Fprintln(tw, "  none yet: the operator has not reconciled the Database")
	}
	_ = tw.Flush()

	b.WriteString("\nInstances:\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tROLE\tREADY\tTIMELINE\tLAG\tSLOT\tVERSION\tNODE\tMESSAGE")
	for _, in := range r.Instances {
		timeline := "-"
		if in.Timeline > 0 {
			timeline = fmt.Sprint(in.Timeline)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.Name, or(in.Role, "-"), yesNo(in.Ready), timeline, lag(in), slot(in),
			or(in.ServerVersion, "-"), or(in.Node, "-"), oneLine(in.Message))
	}
	if len(r.Instances) == 0 {
		fmt.Fprintln(tw, "  no pod yet")
	}
	_ = tw.Flush()

	if bk := r.Backup; bk != nil {
		b.WriteString("\nArchiving and backups:\n")
		archiving := "archiving " + strings.ToLower(or(bk.Archiving, "unknown"))
		switch bk.Archiving {
		case "True":
			archiving = "archiving works"
		case "False":
			archiving = "ARCHIVING FAILS"
		}
		if bk.ArchivingMessage != "" {
			archiving += ": " + oneLine(bk.ArchivingMessage)
		}
		fmt.Fprintf(&b, "  %s\n", archiving)
		if bk.LastArchivedWAL != "" {
			fmt.Fprintf(&b, "  last archived %s, %s\n", bk.LastArchivedWAL, since(now, bk.LastArchivedTime))
		}
		if bk.LastBackup != "" {
			fmt.Fprintf(&b, "  last base backup %s, %s\n", bk.LastBackup, since(now, bk.LastBackupTime))
		} else {
			b.WriteString("  no base backup completed yet\n")
		}
		if bk.FirstRecoverabilityPoint != nil {
			fmt.Fprintf(&b, "  recoverable since %s\n", bk.FirstRecoverabilityPoint.UTC().Format(time.RFC3339))
		}
		if bk.Schedule != "" {
			s := "  schedule " + bk.Schedule + " (UTC)"
			if bk.LastScheduleTime != nil {
				s += ", last run " + since(now, bk.LastScheduleTime)
			}
			if bk.NextScheduleTime != nil {
				s += ", next in " + age(*bk.NextScheduleTime, now) + " (" + bk.NextScheduleTime.UTC().Format(time.RFC3339) + ")"
			}
			b.WriteString(s + "\n")
		}
		if len(bk.Phases) > 0 {
			var parts []string
			for _, p := range []string{"Completed", "Running", "Pending", "Failed"} {
				if n := bk.Phases[p]; n > 0 {
					parts = append(parts, fmt.Sprintf("%d %s", n, p))
				}
			}
			latest := ""
			if l := bk.Latest; l != nil {
				latest = fmt.Sprintf("; latest %s %s, %s", l.Name, l.Phase, since(now, &l.Created))
				if l.Message != "" {
					latest += ": " + oneLine(l.Message)
				}
			}
			fmt.Fprintf(&b, "  Backups: %s%s\n", strings.Join(parts, ", "), latest)
		}
	}

	if len(r.Certificates) > 0 {
		b.WriteString("\nCertificates (soonest to expire first):\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for _, c := range r.Certificates {
			when := "expires in " + age(c.NotAfter, now)
			switch left := c.NotAfter.Sub(now); {
			case left <= 0:
				when = "!! EXPIRED " + age(now, c.NotAfter) + " ago"
			case left < expiringSoon:
				when = "!! " + when
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s (%s)\n", c.Secret, c.Key, when, c.NotAfter.UTC().Format(time.RFC3339))
		}
		_ = tw.Flush()
	}

	if len(r.Warnings) > 0 {
		b.WriteString("\nRecent warnings:\n")
		for _, e := range r.Warnings {
			count := ""
			if e.Count > 1 {
				count = fmt.Sprintf(" (x%d)", e.Count)
			}
			fmt.Fprintf(&b, "  %s ago  %s%s: %s\n", age(now, e.Last), e.Reason, count, oneLine(e.Note))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// expiringSoon is how close to its expiry a certificate is marked: the
// DbkeeperCertificateExpiring alert's threshold.
const expiringSoon = 14 * 24 * time.Hour

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// oneLine is s on one line, cut at 200 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:199]) + "…"
	}
	return s
}

// slot is a standby's slot state: its wal_status, ", inactive" when no
// standby streams through it, "LOST" when it was invalidated; "-" when
// the primary reports no slot for it.
func slot(in Instance) string {
	if in.Slot == "" {
		return "-"
	}
	s := or(in.SlotWALStatus, "?")
	if s == "lost" {
		s = "LOST"
	}
	if !in.SlotActive {
		s += ", inactive"
	}
	return s
}

// lag is a standby's lag as "0 B, 0s", "-" when not known.
func lag(in Instance) string {
	if in.LagBytes == nil && in.LagSeconds == nil {
		return "-"
	}
	var parts []string
	if in.LagBytes != nil {
		parts = append(parts, byteSize(*in.LagBytes))
	}
	if in.LagSeconds != nil {
		parts = append(parts, (time.Duration(*in.LagSeconds * float64(time.Second))).Round(time.Millisecond).String())
	}
	return strings.Join(parts, ", ")
}

// byteSize is n in binary units: 512 B, 1.5 MiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// age is how long ago t was, as kubectl prints ages (5s, 3m, 2h, 4d);
// "-" for a zero time.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// since is "<age> ago (RFC 3339)", "at an unknown time" for nil.
func since(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "at an unknown time"
	}
	return fmt.Sprintf("%s ago (%s)", age(now, *t), t.UTC().Format(time.RFC3339))
}

// quorum says which standbys the primary counts toward the synchronous
// quorum now, as its agent last reported them.
func (r *Report) quorum() string {
	var in []string
	for _, i := range r.Instances {
		if i.SyncState == "quorum" || i.SyncState == "sync" {
			in = append(in, i.Name)
		}
	}
	if len(in) == 0 {
		return "none in the quorum now"
	}
	return fmt.Sprintf("%d in the quorum now: %s", len(in), strings.Join(in, ", "))
}
