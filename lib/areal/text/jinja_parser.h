// A chat template's text as a tree, read the way transformers' Jinja2 environment
// reads it: trim_blocks and lstrip_blocks on, `-` and `+` whitespace control, comments
// dropped, newlines normalized and one trailing newline removed, break/continue
// (loopcontrols) and transformers' {% generation %} block. Anything else Jinja has
// (include, extends, raw, call blocks, ...) is a JinjaError naming the line.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "areal/text/jinja_value.h"

namespace areal::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind {
    Literal,      // literal
    Name,         // name
    List,         // children: the items
    Dict,         // children: key, value, key, value, ...
    Attribute,    // children[0].name
    Item,         // children[0][children[1]]
    Slice,        // children[0][children[1]:children[2]:children[3]] (null where absent)
    Call,         // children[0](children[1..], keyword)
    Filter,       // children[0] | name(children[1..], keyword)
    Test,         // children[0] is [not] name(children[1..])
    Unary,        // name ("-", "+") children[0]
    Binary,       // children[0] name children[1]: + - * / // % ** ~ == != < > <= >= in "not in"
    And,
    Or,
    Not,
    Conditional,  // children[0] if children[1] else children[2] (null: Undefined)
  };
  Kind kind = Kind::Literal;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  bool negated = false;
};

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Generation };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;                // Text
  ExprPtr expr;                    // Output; Set's value; For's iterable
  std::vector<ExprPtr> conditions;                // If: one per branch but a final else
  std::vector<std::vector<Node>> branches;        // If: bodies (conditions.size() or one more)
  std::vector<Node> body, else_body;              // For (else: no iteration), SetBlock, Macro, Generation
  std::vector<std::string> targets;  // For: loop variables; Set/SetBlock: name, or namespace and attribute
  ExprPtr filter;                    // For ... if filter
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: parameters and defaults (null: none)
};

// Throws JinjaError "<name> line N: ..." for what it cannot read.
std::vector<Node> parse_template(const std::string& source, const std::string& name);

}  // namespace areal::jinja
