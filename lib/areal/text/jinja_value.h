// The values a chat template computes with, behaving as the Python objects Jinja2
// gives templates in transformers: None, bool, int, float, str, list, dict (insertion
// ordered, string keys), callables, and Jinja's Undefined (a name or key that is not
// there: prints as "", is false, iterates as empty; most other uses are errors).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace areal::jinja {

// A template that cannot be parsed or rendered; the message names the template's line.
class JinjaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict

// A call's arguments: positional, then keyword.
struct Arguments {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`; `fallback` when neither was given.
  Value get(size_t index, const std::string& name, const Value& fallback) const;
};

using Function = std::function<Value(const Arguments&)>;

class Value {
 public:
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // Undefined
  // Undefined, remembering what was missing for the error that using it raises.
  static Value undefined(std::string what);
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(ValueList items);
  Value(ValueDict items, bool is_namespace = false);
  Value(Function fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::Undefined; }
  bool is_none() const { return type_ == Type::None; }
  bool is_string() const { return type_ == Type::String; }
  bool is_list() const { return type_ == Type::List; }
  bool is_dict() const { return type_ == Type::Dict; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float || type_ == Type::Bool; }
  bool is_namespace() const;

  bool as_bool() const { return bool_; }
  // An Undefined's description: "'name' is undefined", "'dict object' has no attribute 'x'".
  const std::string& undefined_reason() const { return string_; }
  int64_t as_int() const;  // Bool and Int
  double as_double() const;  // Bool, Int and Float
  const std::string& as_string() const { return string_; }
  // Lists and dicts are shared, as Python objects are (a namespace is changed in place).
  ValueList& list() const { return *list_; }
  ValueDict& dict() const { return *dict_; }
  const Function& function() const { return *function_; }

  // A dict's value for `key`, or nullptr.
  Value* find(const std::string& key) const;

  bool truthy() const;
  std::string type_name() const;  // Python's: "str", "NoneType", ...
  // Python's str() and repr(); Undefined prints as "".
  std::string str() const;
  std::string repr() const;
  // Python's json.dumps(value, ensure_ascii=False, indent, separators, sort_keys) as
  // transformers' tojson filter calls it; indent < 0 means None.
  std::string to_json(int indent = -1, const std::string& item_separator = "",
                      const std::string& key_separator = ": ", bool sort_keys = false) const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  Type type_ = Type::Undefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string string_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  bool namespace_ = false;
  std::shared_ptr<Function> function_;
};

inline bool operator!=(const Value& a, const Value& b) { return !(a == b); }

// Python's float repr: the shortest text that reads back as the same double ("0.1",
// "10.0", "1e+16").
std::string python_float(double f);

// A UTF-8 string as code points and back (Python indexes and slices strings by code point).
std::u32string utf8_to_utf32(const std::string& s);
std::string utf32_to_utf8(const std::u32string& s);

}  // namespace areal::jinja
