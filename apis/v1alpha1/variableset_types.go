package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KeyReference names one key of a Secret or ConfigMap in the VariableSet's namespace.
type KeyReference struct {
	// Name of the Secret or ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key inside it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// ValueSource reads a value from a Secret or a ConfigMap.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="valueFrom needs exactly one of secretKeyRef and configMapKeyRef"
type ValueSource struct {
	// +optional
	SecretKeyRef *KeyReference `json:"secretKeyRef,omitempty"`
	// +optional
	ConfigMapKeyRef *KeyReference `json:"configMapKeyRef,omitempty"`
}

// Variable is one Terraform input variable.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="a variable needs exactly one of value and valueFrom"
type Variable struct {
	// Name of the input variable.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_-]*$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// Value is a literal.
	// +optional
	Value *string `json:"value,omitempty"`
	// ValueFrom reads the value from a Secret or ConfigMap key.
	// +optional
	ValueFrom *ValueSource `json:"valueFrom,omitempty"`
	// HCL parses the value as an HCL expression (a list, a map, a number) rather than a string.
	// +optional
	HCL bool `json:"hcl,omitempty"`
	// Sensitive keeps the value out of logs, events and status. Values from Secrets always are.
	// +optional
	Sensitive bool `json:"sensitive,omitempty"`
}

// EnvironmentVariable is one variable of the plan and apply environment. Names that steer the
// runner, OpenTofu or the state backend are reserved and refused (pkg/runner.IsReservedEnv
// defines them; this rule must say the same, which TestReservedEnvNamesRefused in pkg/testenv
// checks).
// +kubebuilder:validation:XValidation:rule="!(self.name.startsWith('MAGOS_') || self.name.startsWith('TF_CLI_ARGS') || self.name.startsWith('TF_LOG') || self.name.startsWith('KUBE_') || self.name in ['TF_DATA_DIR', 'TF_CLI_CONFIG_FILE', 'TERRAFORM_CONFIG', 'TF_PLUGIN_CACHE_DIR', 'TF_IN_AUTOMATION', 'TF_INPUT', 'TF_WORKSPACE', 'TF_REATTACH_PROVIDERS', 'HOME', 'TMPDIR', 'PATH', 'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT', 'GIT_USERNAME', 'GIT_PASSWORD', 'GIT_SSH_PRIVATE_KEY', 'GIT_SSH_KNOWN_HOSTS'])",messageExpression="'env name ' + self.name + ' is reserved: names starting MAGOS_, TF_CLI_ARGS, TF_LOG, KUBE_, and TF_DATA_DIR, TF_CLI_CONFIG_FILE, TERRAFORM_CONFIG, TF_PLUGIN_CACHE_DIR, TF_IN_AUTOMATION, TF_INPUT, TF_WORKSPACE, TF_REATTACH_PROVIDERS, HOME, TMPDIR, PATH, KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT, GIT_USERNAME, GIT_PASSWORD, GIT_SSH_PRIVATE_KEY, GIT_SSH_KNOWN_HOSTS steer the runner'"
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.valueFrom)",message="an environment variable needs exactly one of value and valueFrom"
type EnvironmentVariable struct {
	// Name of the environment variable.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// +optional
	Value *string `json:"value,omitempty"`
	// +optional
	ValueFrom *ValueSource `json:"valueFrom,omitempty"`
	// Sensitive keeps the value out of logs, events and status. Values from Secrets always are.
	// +optional
	Sensitive bool `json:"sensitive,omitempty"`
}

// VariableSetSpec is a reusable set of variables and environment entries.
type VariableSetSpec struct {
	// Variables are Terraform input variables.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	Variables []Variable `json:"variables,omitempty"`

	// Env are environment variables of plan and apply (credentials, TF_* settings).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	Env []EnvironmentVariable `json:"env,omitempty"`
}

// VariableSetStatus is the observed state of a VariableSet.
type VariableSetStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VariableSet holds variables and environment entries that Projects and Workspaces reference.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VariableSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec   VariableSetSpec   `json:"spec,omitempty"`
	Status VariableSetStatus `json:"status,omitempty"`
}

// VariableSetList is a list of VariableSets.
//
// +kubebuilder:object:root=true
type VariableSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VariableSet `json:"items"`
}
