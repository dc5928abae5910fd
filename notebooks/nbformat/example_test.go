package nbformat_test

import (
	"fmt"
	"os"
	"strings"

	"linger/notebooks/nbformat"
)

func ExampleRead() {
	nb, err := nbformat.Read(strings.NewReader(`{
	 "nbformat": 4, "nbformat_minor": 5, "metadata": {},
	 "cells": [{"id": "c1", "cell_type": "code", "metadata": {}, "execution_count": 1,
	  "source": ["x = 40\n", "x + 2"],
	  "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
	   "data": {"text/plain": ["42"]}}]}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	c := nb.Cells[0]
	result, _ := c.Outputs[0].Data.Text("text/plain")
	fmt.Printf("%s %q → %s\n", c.ID, c.Source, result)
	// Output: c1 "x = 40\nx + 2" → 42
}

func ExampleWrite() {
	nb := nbformat.New()
	c := &nbformat.Cell{ID: "hello", Type: nbformat.CellMarkdown, Source: "# Hello\nLinger"}
	nb.Cells = append(nb.Cells, c)
	delete(nb.Metadata, "language_info") // keep the example short
	if err := nbformat.Write(os.Stdout, nb); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {
	//  "cells": [
	//   {
	//    "cell_type": "markdown",
	//    "id": "hello",
	//    "metadata": {},
	//    "source": [
	//     "# Hello\n",
	//     "Linger"
	//    ]
	//   }
	//  ],
	//  "metadata": {
	//   "kernelspec": {
	//    "display_name": "Linger (Starlark)",
	//    "language": "starlark",
	//    "name": "linger"
	//   }
	//  },
	//  "nbformat": 4,
	//  "nbformat_minor": 5
	// }
}
