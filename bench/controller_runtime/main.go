// Command configmirror-cr is the ConfigMirror operator written on controller-runtime: the
// Go anchor of bench/bench_operator.py. It behaves as configmirror/ does (see
// configmirror/src/configmirror/_plan.py): a copy of the source ConfigMap in each target
// namespace that opted in (label kubemoon.dev/accept-mirrors=true), annotated with the mirror's UID;
// a ConfigMap not carrying that UID is never touched (TargetConflict); the Ready
// condition with observedGeneration and the per-target states in the status, written
// only when they change; an Event when Ready changes; the kubemoon.dev/cleanup finalizer
// deleting every copy before the mirror goes. It needs the same RBAC as the Python
// operator (deploy/overlays/cert-manager/rbac.yaml, less the webhooks' access reviews).
//
// It is written the way a controller-runtime user would write it: the manager's shared,
// typed caches (ConfigMirrors in the watched namespace, every ConfigMap, the Namespaces
// matching the target selector), field indexes to map a ConfigMap or Namespace change to
// the mirrors concerned, the cached client for reads, the default client settings
// (HTTP/2, no client-side rate limit) and the default priority work queue.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

const (
	acceptMirrorsLabel = "kubemoon.dev/accept-mirrors"
	finalizer          = "kubemoon.dev/cleanup"
	ownerUIDAnnotation = "kubemoon.dev/owner-uid"
	managedByLabel     = "app.kubernetes.io/managed-by"
	managedByValue     = "kubemoon-configmirror"

	// Field indexes.
	byOwnerUID        = "configmirror/owner-uid" // ConfigMaps: the owner annotation
	byUID             = "configmirror/uid"       // mirrors: their UID
	bySource          = "configmirror/source"    // mirrors: "<namespace>/<source>"
	byTarget          = "configmirror/target"    // mirrors: "<target>/<source>"
	byTargetNamespace = "configmirror/target-namespace"
	selecting         = "*" // the byTargetNamespace key of mirrors with a namespaceSelector
)

func ownerUID(obj client.Object) string { return obj.GetAnnotations()[ownerUIDAnnotation] }

// namedTargets are the namespaces a mirror names, in order, without duplicates.
func namedTargets(m *ConfigMirror) []string {
	var out []string
	for _, t := range m.Spec.Targets.Namespaces {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// targets are the named namespaces, then the accepting ones the selector matches, sorted.
func targets(m *ConfigMirror, accepting map[string]map[string]string) []string {
	out := namedTargets(m)
	sel := m.Spec.Targets.NamespaceSelector
	if sel == nil || len(sel.MatchLabels) == 0 {
		return out
	}
	var picked []string
	for name, nsLabels := range accepting {
		if name == m.Namespace || slices.Contains(out, name) {
			continue
		}
		if labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(nsLabels)) {
			picked = append(picked, name)
		}
	}
	sort.Strings(picked)
	return append(out, picked...)
}

// inSync tells whether copy already is what mirror uid wants from source.
func inSync(copy, source *corev1.ConfigMap, uid string) bool {
	return maps.Equal(copy.Data, source.Data) &&
		bytesMapsEqual(copy.BinaryData, source.BinaryData) &&
		copy.Labels[managedByLabel] == managedByValue &&
		ownerUID(copy) == uid
}

func bytesMapsEqual(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}

// desiredCopy is the copy of source for namespace, built on existing when there is one
// (its other labels and annotations are kept; its resourceVersion makes the update
// conditional).
func desiredCopy(source *corev1.ConfigMap, namespace, uid string, existing *corev1.ConfigMap) *corev1.ConfigMap {
	out := &corev1.ConfigMap{}
	if existing != nil {
		out = existing.DeepCopy()
	}
	out.Name, out.Namespace = source.Name, namespace
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[managedByLabel] = managedByValue
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[ownerUIDAnnotation] = uid
	out.Data, out.BinaryData = nil, nil
	if len(source.Data) > 0 {
		out.Data = maps.Clone(source.Data)
	}
	if len(source.BinaryData) > 0 {
		out.BinaryData = maps.Clone(source.BinaryData)
	}
	return out
}

// Reconciler reconciles one ConfigMirror.
type Reconciler struct {
	client.Client
	APIReader      client.Reader
	Recorder       recorder.EventRecorder
	TargetSelector string
	Log            logr.Logger
}

type write struct {
	verb string // create, update, delete
	obj  *corev1.ConfigMap
}

func (w write) do(ctx context.Context, c client.Client) error {
	switch w.verb {
	case "create":
		return c.Create(ctx, w.obj)
	case "update":
		return c.Update(ctx, w.obj)
	default:
		uid, rv := w.obj.UID, w.obj.ResourceVersion
		return c.Delete(ctx, w.obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	}
}

func deleteExactly(cm *corev1.ConfigMap) write {
	return write{"delete", cm}
}

// Reconcile plans from the caches and writes what the plan says, in the order of
// configmirror/src/configmirror/_plan.py: the copies (together), then the mirror's own status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mirror := &ConfigMirror{}
	if err := r.Get(ctx, req.NamespacedName, mirror); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	uid := string(mirror.UID)
	managed := &corev1.ConfigMapList{}
	if err := r.List(ctx, managed, client.MatchingFields{byOwnerUID: uid}); err != nil {
		return reconcile.Result{}, err
	}

	if !mirror.DeletionTimestamp.IsZero() {
		if !slices.Contains(mirror.Finalizers, finalizer) {
			return reconcile.Result{}, nil
		}
		if len(managed.Items) == 0 {
			// The finalizer would go: read every copy from the API server first, so one
			// the cache misses is deleted, not orphaned (as configmirror does).
			listed := &corev1.ConfigMapList{}
			err := r.APIReader.List(ctx, listed, client.MatchingLabels{managedByLabel: managedByValue})
			if err != nil {
				return reconcile.Result{}, err
			}
			managed.Items = slices.DeleteFunc(listed.Items, func(c corev1.ConfigMap) bool {
				return ownerUID(&c) != uid
			})
		}
		if len(managed.Items) > 0 {
			var writes []write
			for i := range managed.Items {
				writes = append(writes, deleteExactly(&managed.Items[i]))
			}
			if res, err := r.perform(ctx, writes); err != nil || !res.IsZero() {
				return res, err
			}
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return r.patchFinalizers(ctx, mirror, slices.DeleteFunc(slices.Clone(mirror.Finalizers),
			func(f string) bool { return f == finalizer }))
	}
	if !slices.Contains(mirror.Finalizers, finalizer) {
		// Nothing is created before the finalizer is in place, so nothing can leak.
		return r.patchFinalizers(ctx, mirror, append(slices.Clone(mirror.Finalizers), finalizer))
	}

	namespaces := &corev1.NamespaceList{}
	if err := r.List(ctx, namespaces); err != nil { // the cache holds the accepting ones only
		return reconcile.Result{}, err
	}
	accepting := make(map[string]map[string]string, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		accepting[ns.Name] = ns.Labels
	}
	source := &corev1.ConfigMap{}
	err := r.Get(ctx, types.NamespacedName{Namespace: mirror.Namespace, Name: mirror.Spec.Source}, source)
	if apierrors.IsNotFound(err) {
		source = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}

	var writes []write
	var states []TargetState
	var conflicts, refused []string
	wanted := map[string]bool{}
	all := targets(mirror, accepting)
	for _, target := range all {
		where := target + "/" + mirror.Spec.Source
		if _, ok := accepting[target]; !ok {
			refused = append(refused, target)
			states = append(states, TargetState{target, "NotAllowed",
				fmt.Sprintf("namespace %s does not match %s", target, r.TargetSelector)})
			continue
		}
		wanted[target] = true
		existing := &corev1.ConfigMap{}
		err := r.Get(ctx, types.NamespacedName{Namespace: target, Name: mirror.Spec.Source}, existing)
		if apierrors.IsNotFound(err) {
			existing = nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		if existing != nil && ownerUID(existing) != uid {
			conflicts = append(conflicts, where)
			states = append(states, TargetState{target, "Conflict",
				fmt.Sprintf("ConfigMap %s exists and is not managed by this ConfigMirror", where)})
			continue
		}
		if source == nil {
			states = append(states, TargetState{target, "Pending", "waiting for the source"})
			continue
		}
		if existing == nil {
			writes = append(writes, write{"create", desiredCopy(source, target, uid, nil)})
		} else if !inSync(existing, source, uid) {
			writes = append(writes, write{"update", desiredCopy(source, target, uid, existing)})
		}
		states = append(states, TargetState{target, "Synced", ""})
	}
	for i := range managed.Items {
		c := &managed.Items[i]
		if !wanted[c.Namespace] || c.Name != mirror.Spec.Source {
			writes = append(writes, deleteExactly(c))
		}
	}
	if res, err := r.perform(ctx, writes); err != nil || !res.IsZero() {
		return res, err
	}

	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Synced",
		Message: fmt.Sprintf("mirrored to %d namespace(s)", len(all))}
	switch {
	case source == nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, "SourceNotFound"
		ready.Message = fmt.Sprintf("ConfigMap %s/%s not found", mirror.Namespace, mirror.Spec.Source)
	case len(refused) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, "TargetNotAllowed"
		ready.Message = fmt.Sprintf("namespace(s) not matching %s, nothing written there: %s",
			r.TargetSelector, strings.Join(refused, ", "))
	case len(conflicts) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, "TargetConflict"
		ready.Message = "not managed by this ConfigMirror, left untouched: " + strings.Join(conflicts, ", ")
	}
	ready.ObservedGeneration = mirror.Generation
	ready.LastTransitionTime = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	var old *metav1.Condition
	for i := range mirror.Status.Conditions {
		if mirror.Status.Conditions[i].Type == "Ready" {
			old = &mirror.Status.Conditions[i]
		}
	}
	if old != nil && old.Status == ready.Status && !old.LastTransitionTime.IsZero() {
		ready.LastTransitionTime = old.LastTransitionTime
	}
	status := ConfigMirrorStatus{
		ObservedGeneration: mirror.Generation,
		Conditions:         []metav1.Condition{ready},
		Targets:            states,
	}
	if !statusEqual(status, mirror.Status) {
		updated := mirror.DeepCopy()
		updated.Status = status
		if err := r.Status().Update(ctx, updated); err != nil {
			if apierrors.IsConflict(err) {
				r.Log.Info("write conflict, requeueing", "mirror", req.NamespacedName, "error", err.Error())
				return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // a rate-limited retry
			}
			return reconcile.Result{}, err
		}
		writes = append(writes, write{verb: "status"})
	}
	if len(writes) > 0 {
		r.Log.Info(fmt.Sprintf("%d write(s)", len(writes)), "mirror", req.NamespacedName)
	}
	if old == nil || old.Status != ready.Status || old.Reason != ready.Reason || old.Message != ready.Message {
		kind := corev1.EventTypeNormal
		if ready.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(mirror, nil, kind, ready.Reason, "Reconcile", "%s", ready.Message)
	}
	return reconcile.Result{}, nil
}

func statusEqual(a, b ConfigMirrorStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || len(a.Conditions) != len(b.Conditions) ||
		!slices.Equal(a.Targets, b.Targets) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			x.ObservedGeneration != y.ObservedGeneration || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}

// perform sends the copy writes together; a lost race (409) requeues, a delete of a
// ConfigMap already gone is what it wanted, any other error fails the reconcile.
func (r *Reconciler) perform(ctx context.Context, writes []write) (reconcile.Result, error) {
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() { errs[i] = w.do(ctx, r.Client) })
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
		case writes[i].verb == "delete" && apierrors.IsNotFound(err):
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			r.Log.Info("write conflict, requeueing", "error", err.Error())
			return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // a rate-limited retry
		default:
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// patchFinalizers sets the finalizers with a merge patch naming the resourceVersion
// (conditional, like an update).
func (r *Reconciler) patchFinalizers(ctx context.Context, m *ConfigMirror, finalizers []string) (reconcile.Result, error) {
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	m.Finalizers = finalizers
	if err := r.Patch(ctx, m, patch); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // a rate-limited retry
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.Log.Info("1 write(s)", "mirror", client.ObjectKeyFromObject(m))
	return reconcile.Result{}, nil
}

// settled tells whether copy is exactly what its owner mirror wants (typically the echo
// of the mirror's own write): such a change needs no reconcile of the owner.
func settled(ctx context.Context, c client.Reader, copy *corev1.ConfigMap, m *ConfigMirror) bool {
	if !m.DeletionTimestamp.IsZero() || ownerUID(copy) != string(m.UID) || copy.Name != m.Spec.Source ||
		!slices.Contains(namedTargets(m), copy.Namespace) {
		return false
	}
	source := &corev1.ConfigMap{}
	if c.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.Source}, source) != nil {
		return false
	}
	return inSync(copy, source, string(m.UID))
}

// mirrorsOf lists the cached mirrors whose index field has value.
func mirrorsOf(ctx context.Context, c client.Reader, field, value string) []ConfigMirror {
	list := &ConfigMirrorList{}
	if err := c.List(ctx, list, client.MatchingFields{field: value}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return list.Items
}

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// configMapHandler enqueues the mirrors a ConfigMap change concerns: those using its
// name as source or as copy, and its owner unless the change (a create or an update)
// leaves the copy settled.
func configMapHandler(c client.Reader) handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(ctx context.Context, q queue, old, cm client.Object, deleted bool) {
		keys := map[types.NamespacedName]bool{}
		where := cm.GetNamespace() + "/" + cm.GetName()
		for _, field := range []string{bySource, byTarget} {
			for _, m := range mirrorsOf(ctx, c, field, where) {
				keys[client.ObjectKeyFromObject(&m)] = true
			}
		}
		for _, obj := range []client.Object{old, cm} {
			if obj == nil || ownerUID(obj) == "" {
				continue
			}
			for _, m := range mirrorsOf(ctx, c, byUID, ownerUID(obj)) {
				keys[client.ObjectKeyFromObject(&m)] = true
			}
		}
		if copy, ok := cm.(*corev1.ConfigMap); ok && !deleted && ownerUID(cm) != "" && len(keys) > 0 {
			for _, m := range mirrorsOf(ctx, c, byUID, ownerUID(cm)) {
				if settled(ctx, c, copy, &m) {
					delete(keys, client.ObjectKeyFromObject(&m))
				}
			}
		}
		for key := range keys {
			q.Add(reconcile.Request{NamespacedName: key})
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) {
			enqueue(ctx, q, nil, e.Object, false)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew, false)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
			enqueue(ctx, q, nil, e.Object, true)
		},
	}
}

// namespaceHandler enqueues the mirrors naming a Namespace that started or stopped
// accepting copies, and those selecting namespaces by label.
func namespaceHandler(c client.Reader) handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, ns client.Object) []reconcile.Request {
		var out []reconcile.Request
		seen := map[types.NamespacedName]bool{}
		for _, value := range []string{ns.GetName(), selecting} {
			for _, m := range mirrorsOf(ctx, c, byTargetNamespace, value) {
				if key := client.ObjectKeyFromObject(&m); !seen[key] {
					seen[key] = true
					out = append(out, reconcile.Request{NamespacedName: key})
				}
			}
		}
		return out
	})
}

func indexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &corev1.ConfigMap{}, byOwnerUID, func(o client.Object) []string {
		if uid := ownerUID(o); uid != "" {
			return []string{uid}
		}
		return nil
	}); err != nil {
		return err
	}
	mirrorIndexes := map[string]func(m *ConfigMirror) []string{
		byUID:    func(m *ConfigMirror) []string { return []string{string(m.UID)} },
		bySource: func(m *ConfigMirror) []string { return []string{m.Namespace + "/" + m.Spec.Source} },
		byTarget: func(m *ConfigMirror) []string {
			var out []string
			for _, t := range namedTargets(m) {
				out = append(out, t+"/"+m.Spec.Source)
			}
			return out
		},
		byTargetNamespace: func(m *ConfigMirror) []string {
			out := namedTargets(m)
			if m.Spec.Targets.NamespaceSelector != nil {
				out = append(out, selecting)
			}
			return out
		},
	}
	for name, fn := range mirrorIndexes {
		err := idx.IndexField(ctx, &ConfigMirror{}, name, func(o client.Object) []string {
			return fn(o.(*ConfigMirror))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func main() {
	namespace := flag.String("namespace", "", "the namespace whose ConfigMirrors are reconciled (default: all)")
	workers := flag.Int("workers", 4, "reconciles run at once")
	selector := flag.String("target-selector", acceptMirrorsLabel+"=true",
		"the label selector of the namespaces that accept copies")
	probes := flag.String("probe-address", "127.0.0.1:0", "where /healthz and /readyz are served")
	flag.Parse()

	logger := funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, time.Now().UTC().Format(time.RFC3339Nano), prefix, args)
	}, funcr.Options{})
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	if err := run(*namespace, *workers, *selector, *probes, logger); err != nil {
		logger.Error(err, "configmirror-cr failed")
		os.Exit(1)
	}
}

func run(namespace string, workers int, selector, probes string, logger logr.Logger) error {
	targetSelector, err := labels.Parse(selector)
	if err != nil {
		return fmt.Errorf("--target-selector: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := addKnownTypes(scheme); err != nil {
		return err
	}
	config, err := ctrl.GetConfig() // --kubeconfig (registered by controller-runtime)
	if err != nil {
		return err
	}
	mirrorCache := cache.ByObject{}
	if namespace != "" {
		mirrorCache.Namespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probes,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&ConfigMirror{}:     mirrorCache,
			&corev1.Namespace{}: {Label: targetSelector},
		}},
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := indexes(ctx, mgr); err != nil {
		return err
	}
	r := &Reconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Recorder:       mgr.GetEventRecorder("configmirror-cr"),
		TargetSelector: selector,
		Log:            logger.WithName("configmirror"),
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("configmirror").
		For(&ConfigMirror{}).
		Watches(&corev1.ConfigMap{}, configMapHandler(mgr.GetCache())).
		Watches(&corev1.Namespace{}, namespaceHandler(mgr.GetCache())).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
