// What a chat template can call: Jinja's filters and tests, the Python methods of
// str, dict and list that real templates use, transformers' globals (raise_exception,
// strftime_now, namespace, dict) and Jinja's range. Anything else is an error naming it.
#pragma once

#include <string>

#include "areal/text/jinja_value.h"

namespace areal::jinja {

// Thrown by a builtin; the renderer adds the template's line to the message.
class EvalError : public JinjaError {
 public:
  using JinjaError::JinjaError;
};

// Whether a filter / test of that name exists (the parser refuses others, as Jinja does).
bool is_filter(const std::string& name);
bool is_test(const std::string& name);

// `value | name(args)`.
Value apply_filter(const std::string& name, const Value& value, const Arguments& args);
// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, const Arguments& args);
// `object.name`: a dict's key or method, a namespace's attribute, a string's method;
// Undefined when there is none. Throws for an Undefined object.
Value get_attribute(const Value& object, const std::string& name);
// `object[key]`: an item first, then an attribute (as Jinja's getitem).
Value get_item(const Value& object, const Value& key);
// A global function by name, or Undefined.
Value global_function(const std::string& name);

// Python's semantics for the operators templates use.
Value binary_operator(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// The items a for loop or a filter walks: a list's items, a dict's keys, a string's
// characters; none for Undefined. Throws for anything else.
ValueList iterate(const Value& value);
// Python's len() (strings count code points).
int64_t length(const Value& value);

}  // namespace areal::jinja
