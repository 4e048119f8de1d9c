package main

// The ConfigMirror v1beta1 type (deploy/base/crd.yaml, the storage version), with the
// deep copies controller-gen would generate, written out by hand so that the build needs
// nothing but the Go toolchain and the module proxy.

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var groupVersion = schema.GroupVersion{Group: "kubemoon.dev", Version: "v1beta1"}

// NamespaceSelector selects namespaces by their labels (matchLabels only).
type NamespaceSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// Targets names where the copies go.
type Targets struct {
	Namespaces        []string           `json:"namespaces"`
	NamespaceSelector *NamespaceSelector `json:"namespaceSelector,omitempty"`
}

// ConfigMirrorSpec is what to mirror and where.
type ConfigMirrorSpec struct {
	Source  string  `json:"source"`
	Targets Targets `json:"targets"`
}

// TargetState is the state of the copy in one target namespace.
type TargetState struct {
	Namespace string `json:"namespace"`
	State     string `json:"state"`
	Message   string `json:"message"`
}

// ConfigMirrorStatus is what the operator last observed and did.
type ConfigMirrorStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	Targets            []TargetState      `json:"targets,omitempty"`
}

// ConfigMirror mirrors one ConfigMap into several namespaces.
type ConfigMirror struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConfigMirrorSpec   `json:"spec"`
	Status ConfigMirrorStatus `json:"status,omitempty"`
}

// ConfigMirrorList is a list of ConfigMirrors.
type ConfigMirrorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConfigMirror `json:"items"`
}

func copyStrings(in []string) []string {
	if in == nil {
		return nil
	}
	return append([]string(nil), in...)
}

// DeepCopyInto copies the receiver into out.
func (in *ConfigMirror) DeepCopyInto(out *ConfigMirror) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Targets.Namespaces = copyStrings(in.Spec.Targets.Namespaces)
	if sel := in.Spec.Targets.NamespaceSelector; sel != nil {
		labels := make(map[string]string, len(sel.MatchLabels))
		for k, v := range sel.MatchLabels {
			labels[k] = v
		}
		out.Spec.Targets.NamespaceSelector = &NamespaceSelector{MatchLabels: labels}
	}
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	if in.Status.Targets != nil {
		out.Status.Targets = append([]TargetState(nil), in.Status.Targets...)
	}
}

// DeepCopy returns a copy of the receiver.
func (in *ConfigMirror) DeepCopy() *ConfigMirror {
	if in == nil {
		return nil
	}
	out := new(ConfigMirror)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ConfigMirror) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (in *ConfigMirrorList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(ConfigMirrorList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]ConfigMirror, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(groupVersion, &ConfigMirror{}, &ConfigMirrorList{})
	metav1.AddToGroupVersion(scheme, groupVersion)
	return nil
}
