package e2eharness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/leakscan"
)

// Source is a text the leak scan reads: a log file or an object as JSON.
type Source struct {
	// Name says where the text is from: a file's base name, or the type,
	// namespace and name of an Event.
	Name string
	// Data is the text.
	Data []byte
}

// EventSources returns every Event the list options select, of both Event
// APIs (core/v1 and events.k8s.io/v1), each as JSON: the form a password
// in a message would take when the Event is printed.
func EventSources(ctx context.Context, c client.Client, opts ...client.ListOption) ([]Source, error) {
	var sources []Source
	for _, list := range []client.ObjectList{&corev1.EventList{}, &eventsv1.EventList{}} {
		if err := c.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("listing %T: %w", list, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			data, err := json.Marshal(item)
			if err != nil {
				return nil, err
			}
			obj := item.(client.Object)
			sources = append(sources, Source{Name: fmt.Sprintf("%T %s/%s", item, obj.GetNamespace(), obj.GetName()), Data: data})
		}
	}
	return sources, nil
}

// FileSources reads files; a file that does not exist is passed over.
func FileSources(files ...string) ([]Source, error) {
	var sources []Source
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sources = append(sources, Source{Name: filepath.Base(f), Data: data})
	}
	return sources, nil
}

// Scan returns every value of scanner found in sources.
func Scan(scanner *leakscan.Scanner, sources []Source) []leakscan.Leak {
	leaks := make([]leakscan.Leak, 0, len(sources))
	for _, s := range sources {
		leaks = append(leaks, scanner.Scan(s.Name, s.Data)...)
	}
	return leaks
}

// Size returns the bytes of sources together.
func Size(sources []Source) int64 {
	var n int64
	for _, s := range sources {
		n += int64(len(s.Data))
	}
	return n
}
